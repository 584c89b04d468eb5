// Package approver is the approval service: the HTTP API and inbox page
// through which people decide parked runs, and the consumer of signed
// approval events that external systems publish on NATS.
//
// Every decision goes through client.Decide, the one audited decision
// path: the decider is the identity of a verified token (or
// "<system>:<who>" for an event), never a name taken from the request.
//
//	set, _ := tokens.Load("tokens.json")
//	srv, err := approver.New(approver.Config{Client: cl, Tokens: set, FourEyes: true, NATS: nc, EventSecrets: systems})
//	if err != nil { ... }
//	ln, _ := net.Listen("tcp", "127.0.0.1:8081")
//	err = srv.Serve(ctx, ln) // the API, the page at /, and the events, until ctx ends
//
// HTTP API (JSON, Authorization: Bearer <token>):
//
//	GET  /api/approvals               pending approvals of the caller's groups, oldest first
//	GET  /api/approvals/{run}         one pending approval
//	POST /api/approvals/{run}/approve {"payload_sha256": "...", "reason": "...", "step": n}
//	POST /api/approvals/{run}/reject  same body
//
// 401 no valid token, 403 outside the caller's groups or four-eyes, 404
// unknown run, 409 not waiting, stale hash or wrong step, 400 malformed
// body or no payload_sha256, 413 body over MaxBody. Errors are
// {"error": "...", "code": "..."}.
//
// Signals: POST /api/runs/{run}/signals/{name} with {"data": <JSON>,
// "id": "<optional, for retries>"} delivers a signal (a token of the groups
// the workflow names for it with steps.Workflow.Signal, or of
// operators; any valid token when it names none; the token's identity is
// recorded): 200 SignalResult, 400 malformed body, name, id or data, 401,
// 403 outside those groups (logged, nothing stored), 404 unknown run, 409
// ended run or a name the run's workflow does not wait for, 413 data over
// 64 KiB. Signal events (not limited by groups: the signature is the check):
// subject durable.signals.<system>, body SignalEvent, signed as approval
// events; the signal's id on the run derives from the system and the
// event id, so a replay to any replica is delivered once.
//
// Operators (tokens of group OperatorsGroup only; 401 without a token,
// 403 outside the group) have the runs API and pages (runs.go:
// GET /api/runs, GET /api/runs/{run}, GET /api/dlq, POST
// /api/runs/{run}/cancel and /redrive; pages /runs, /runs/{run}, /dlq)
// and, with Config.Schedules, the schedules API and page (schedules.go,
// through internal/scheduleops as `durable schedule` is):
//
//	GET    /api/schedules                  {"schedules": [schedule.View]}, by name
//	GET    /api/schedules/{name}           schedule.View (as `schedule list --json`)
//	POST   /api/schedules                  body schedule.Spec as JSON; 201 ScheduleCreated
//	POST   /api/schedules/{name}/pause     schedule.View
//	POST   /api/schedules/{name}/resume    schedule.View
//	POST   /api/schedules/{name}/trigger   schedule.Fire; its run id is <name>-<now, to the second>
//	DELETE /api/schedules/{name}           {"deleted": "<name>"}
//
// 400 a bad spec (the CLI's exit-2 message, naming the field and value)
// or body, 404 unknown schedule or action, 409 a name taken (code exists)
// or a trigger's run not started (code not_started). The page /schedules
// shows them with next and last fire, and pauses, resumes and triggers.
//
// Events: subject durable.approvals.<system>, body Event, header
// Durable-Signature: sha256=<hex HMAC-SHA256 of the body>. Event ids are
// remembered in memory by the replica that handled them (several
// approvers share the events in one queue group); a replay that reaches
// another replica is still refused by client.Decide unless the run waits
// again at the same step with the same payload within the ts window.
package approver
