package agent

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/durable-run/durable/pkg/model"
)

// Policy says what a run does when it reaches a budget.
type Policy string

const (
	// DeadLetter ends the run as dead, with the budget in the reason
	// (the default).
	DeadLetter Policy = "dead-letter"
	// Park asks for approval to continue: an approval raises the budget
	// that was reached by its original amount again; a rejection fails
	// the run.
	Park Policy = "park"
)

// Budget bounds a run. Zero means no bound.
type Budget struct {
	// MaxSteps counts the run's steps (model and tool steps).
	MaxSteps int `json:"max_steps,omitempty"`
	// MaxTokens counts input and output tokens of model calls.
	MaxTokens int64 `json:"max_tokens,omitempty"`
	// MaxSpend is in the unit of Prices (e.g. USD).
	MaxSpend float64 `json:"max_spend,omitempty"`
	// OnReach: DeadLetter (default) or Park.
	OnReach Policy `json:"on_reach,omitempty"`
	// Group decides on continuing a parked run. Default "supervisors".
	Group string `json:"group,omitempty"`
}

// Usage is what a run has used, kept in its state and committed with each
// step. A model call counts once, in the step that recorded it: a retried
// or resumed step that reads the recording adds it once, when it commits,
// and a call made again (its recording was lost) counts again.
type Usage struct {
	ModelCalls   int     `json:"model_calls"`
	ToolCalls    int     `json:"tool_calls"`
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	Spend        float64 `json:"spend,omitempty"`
}

// Tokens is input plus output tokens.
func (u Usage) Tokens() int64 { return u.InputTokens + u.OutputTokens }

// reached names the first budget the run has used up, before step runs:
// "steps", "tokens", "spend", or "".
func (b Budget) reached(u Usage, step int) (what string, used, limit string) {
	switch {
	case b.MaxSteps > 0 && step > b.MaxSteps:
		return "steps", strconv.Itoa(step - 1), strconv.Itoa(b.MaxSteps)
	case b.MaxTokens > 0 && u.Tokens() >= b.MaxTokens:
		return "tokens", strconv.FormatInt(u.Tokens(), 10), limitOf(b, "tokens")
	case b.MaxSpend > 0 && u.Spend >= b.MaxSpend:
		return "spend", fmt.Sprintf("%.4f", u.Spend), limitOf(b, "spend")
	}
	return "", "", ""
}

// raise extends the budget named what by base's amount.
func (b *Budget) raise(what string, base Budget) {
	switch what {
	case "steps":
		b.MaxSteps += max(base.MaxSteps, 1)
	case "tokens":
		b.MaxTokens += max(base.MaxTokens, 1)
	case "spend":
		b.MaxSpend += base.MaxSpend
	}
}

func (b Budget) check() error {
	switch {
	case b.MaxSteps < 0 || b.MaxTokens < 0 || b.MaxSpend < 0:
		return fmt.Errorf("budget %+v: limits must not be negative", b)
	case b.OnReach != "" && b.OnReach != DeadLetter && b.OnReach != Park:
		return fmt.Errorf("budget on_reach %q: use %q or %q", b.OnReach, DeadLetter, Park)
	}
	return nil
}

// Price is what a model's tokens cost, per million.
type Price struct {
	Input  float64 `json:"input"`
	Output float64 `json:"output"`
}

// Prices by model name. A response's model (a dated snapshot such as
// claude-sonnet-4-5-20250929) is priced by the longest name that is a
// prefix of it.
type Prices map[string]Price

// ParsePrices reads "model=input/output,..." (per million tokens), e.g.
// "claude-sonnet-4-5=3/15,gpt-4o=2.5/10", as DURABLE_MODEL_PRICES holds it.
func ParsePrices(s string) (Prices, error) {
	p := Prices{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, costs, ok := strings.Cut(item, "=")
		in, out, ok2 := strings.Cut(costs, "/")
		name = strings.TrimSpace(name)
		if !ok || !ok2 || name == "" {
			return nil, fmt.Errorf("model price %q: want model=input/output per million tokens", item)
		}
		pi, err1 := strconv.ParseFloat(strings.TrimSpace(in), 64)
		po, err2 := strconv.ParseFloat(strings.TrimSpace(out), 64)
		if err1 != nil || err2 != nil || !(pi >= 0 && po >= 0) || math.IsInf(pi, 0) || math.IsInf(po, 0) {
			return nil, fmt.Errorf("model price %q: prices must be finite numbers >= 0", item)
		}
		if _, dup := p[name]; dup {
			return nil, fmt.Errorf("model price %q: %s is priced twice", item, name)
		}
		p[name] = Price{Input: pi, Output: po}
	}
	return p, nil
}

// Cost of usage on the model named name; ok is false when no price names it.
func (p Prices) Cost(name string, u model.Usage) (cost float64, ok bool) {
	// Two names that are both prefixes of name and of one length are
	// the same name: the longest is unique, in any order.
	best := ""
	found := false
	for n := range p {
		if strings.HasPrefix(name, n) && (!found || len(n) > len(best)) {
			best, found = n, true
		}
	}
	if !found {
		return 0, false
	}
	pr := p[best]
	return (float64(u.InputTokens)*pr.Input + float64(u.OutputTokens)*pr.Output) / 1e6, true
}

// cut returns s cut to at most n bytes, at a character boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// limitOf is the limit named what, as text.
func limitOf(b Budget, what string) string {
	switch what {
	case "steps":
		return strconv.Itoa(b.MaxSteps)
	case "tokens":
		return strconv.FormatInt(b.MaxTokens, 10)
	}
	return fmt.Sprintf("%.4f", b.MaxSpend)
}
