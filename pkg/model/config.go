package model

import (
	"fmt"
	"net/http"
	"os"
	"strings"
)

// Config configures a provider adapter (pkg/model/anthropic,
// pkg/model/openai); each documents its defaults.
type Config struct {
	APIKey string // required
	Model  string // required
	// BaseURL of the API; default the provider's.
	BaseURL string
	// MaxTokens when the request does not say; default the adapter's.
	MaxTokens int
	Retry     Retry
	// HTTPClient; default http.DefaultClient.
	HTTPClient *http.Client
}

// ConfigFromEnv reads <PREFIX>_API_KEY, <PREFIX>_MODEL and
// <PREFIX>_BASE_URL (optional), e.g. prefix "ANTHROPIC".
func ConfigFromEnv(prefix string) Config {
	return Config{
		APIKey:  os.Getenv(prefix + "_API_KEY"),
		Model:   os.Getenv(prefix + "_MODEL"),
		BaseURL: os.Getenv(prefix + "_BASE_URL"),
	}
}

// Check refuses a Config without a key or a model, naming the environment
// variables of prefix that set them, and fills in the HTTP client.
func (c *Config) Check(provider, prefix, exampleModel string) error {
	var missing []string
	if c.APIKey == "" {
		missing = append(missing, "API key ("+prefix+"_API_KEY)")
	}
	if c.Model == "" {
		missing = append(missing, "model ("+prefix+"_MODEL, e.g. "+exampleModel+")")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s: missing %s", provider, strings.Join(missing, " and "))
	}
	if c.HTTPClient == nil {
		c.HTTPClient = http.DefaultClient
	}
	return nil
}
