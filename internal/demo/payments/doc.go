// Package payments is the demo payments provider that `durable dev` serves
// under /demo/payments, plus a typed client for it. It behaves like a real
// provider's idempotency contract so the claim workflow's payment step can be
// crashed and retried without paying twice:
//
//   - POST with an Idempotency-Key pays once (201);
//   - the same key and the same body again answers the original payment (200)
//     with Idempotent-Replayed: true;
//   - the same key with a different body is refused (422).
//
// Every payment is fsynced to an append-only JSON-lines file before the
// response is written, so a 2xx is never forgotten, even after SIGKILL.
//
//	srv, err := payments.Open(filepath.Join(dataDir, "payments.jsonl"))
//	if err != nil { ... }
//	defer srv.Close()
//	mux.Handle("/demo/payments/", http.StripPrefix("/demo/payments", srv.Handler()))
//
//	c := payments.Client{BaseURL: "http://127.0.0.1:8080/demo/payments"}
//	p, replayed, err := c.Pay(ctx, run+":step6", payments.PayRequest{
//		RunID: run, Claim: "CLM-1", Amount: 1840, Currency: "EUR", Payee: "J. Doe",
//	})
package payments
