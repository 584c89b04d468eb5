package approver

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"html"
	"net/http"
	"regexp"
	"strings"
)

// inboxHTML is the inbox page: one file, no external assets. It renders
// payloads with textContent only (a payload may hold model output).
//
//go:embed inbox.html
var inboxHTML []byte

// runsHTML is the on-call's page, served at /runs, /runs/{run}, /dlq and
// /schedules: one file that reads its view from the path and renders what
// the runs and schedules API answers, with textContent only (inputs and
// payloads may hold model output).
//
//go:embed runs.html
var runsHTML []byte

// inboxCSP and runsCSP allow exactly the page's own inline script and
// style (by hash) and requests to this origin: injected markup could run
// nothing.
var (
	inboxCSP = pageCSP(inboxHTML)
	runsCSP  = pageCSP(runsHTML)
)

func pageCSP(page []byte) string {
	hashes := func(tag string) string {
		re := regexp.MustCompile(`(?s)<` + tag + `>(.*?)</` + tag + `>`)
		var out []string
		for _, m := range re.FindAllSubmatch(page, -1) {
			sum := sha256.Sum256(m[1])
			out = append(out, "'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'")
		}
		return strings.Join(out, " ")
	}
	return "default-src 'none'; script-src " + hashes("script") + "; style-src " + hashes("style") +
		"; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}

func (s *Server) handlePage(w http.ResponseWriter, _ *http.Request) {
	writePage(w, inboxHTML, inboxCSP)
}

func (s *Server) handleRunsPage(w http.ResponseWriter, _ *http.Request) {
	writePage(w, s.runsPage, runsCSP)
}

// withTraceURL puts the trace link's template on the page's body (an
// attribute: the script and style, and so the CSP hashes, are unchanged).
func withTraceURL(page []byte, traceURL string) []byte {
	if traceURL == "" {
		return page
	}
	return bytes.Replace(page, []byte("<body>"), []byte(`<body data-trace-url="`+html.EscapeString(traceURL)+`">`), 1)
}

func writePage(w http.ResponseWriter, page []byte, csp string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", csp)
	_, _ = w.Write(page)
}
