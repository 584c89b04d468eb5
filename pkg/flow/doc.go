// Package flow keeps the fleet-wide limits of the resources that
// workflows share (a model provider, a payments API): rates, slowed down
// fleet-wide when a provider answers "too many requests" (Store, Limiter),
// and concurrency limits, how many calls run at once (Store.SetConcurrency,
// Pool). Both may also be set per key, a tenant say, beside the limit over
// all keys or alone (Store.SetRatePerKey and Limiter.TakeKey,
// Store.SetConcurrencyPerKey and Pool.Acquire with Queue.Key).
//
// A limit is a name ("anthropic", "model", "payments-api") with a Rate: N
// tokens per period, with a burst. Limits live in a JetStream KV bucket
// (Store), whichever checkpoint store the runs use; every worker of the
// fleet takes its tokens there, so the provider sees the limit however
// many workers there are. An operator's tool sets them:
//
//	st, err := flow.NewStore(ctx, js, flow.StoreOptions{})
//	if err != nil {
//		return err
//	}
//	rate, err := flow.ParseRate("600/m") // ErrBadLimit names what is wrong
//	if err != nil {
//		return err
//	}
//	rate.Burst = 20
//	_, err = st.Set(ctx, "anthropic", rate, "ana")
//
// A worker takes a token before each call of the resource, through a
// Limiter (which answers for names with no limit without a round trip),
// and tells it when the provider pushed back:
//
//	lim := flow.NewLimiter(st, flow.LimiterOptions{})
//	for {
//		wait, err := lim.Take(ctx, "anthropic", time.Now())
//		if err != nil {
//			return err
//		}
//		if wait == 0 {
//			break
//		}
//		time.Sleep(wait) // or hand the step back for wait
//	}
//	resp, err := call(ctx)
//	if _, serr := lim.SlowDownOn(ctx, "anthropic", err, time.Now()); serr != nil {
//		log.Warn().Err(serr).Msg("slow down anthropic")
//	}
//
// The algorithm is GCRA, the generic cell rate algorithm: one timestamp
// per limit, the theoretical arrival time of the next token, changed by a
// compare-and-set on the limit's KV key. A refused Take writes nothing.
// After a slow-down (Store.SlowDown, or SlowDownOn with an error that
// says it is a rate-limit answer, see RateLimited) every Take of the
// fleet waits until its end, and the limit then resumes at its steady
// pace.
//
// A worker's NATS user needs, for the default bucket: $KV.durable_limits.>
// (writes), direct gets and STREAM.MSG.GET of KV_durable_limits (reads),
// CONSUMER.CREATE and .DELETE of KV_durable_limits and $JS.FC (listing
// keys), STREAM.INFO (binding), and STREAM.CREATE with $JS.API.INFO where
// it may create the bucket. TestWorkerRights runs a worker with these
// only.
package flow
