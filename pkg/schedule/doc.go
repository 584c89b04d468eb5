// Package schedule starts runs on a calendar: a schedule names a
// workflow, a cron expression in a time zone and the runs' input, and each
// of its fires starts one run whose id is derived from the schedule and
// the fire time (FireID), however many schedulers fire it, and after any
// of them restarts.
//
// Schedules live in a JetStream KV bucket (Store), whichever checkpoint
// store the runs use. An operator's tool creates, lists, pauses, resumes,
// deletes and triggers them:
//
//	st, err := schedule.NewStore(ctx, js, schedule.StoreOptions{})
//	if err != nil {
//		return err
//	}
//	_, err = st.Create(ctx, schedule.Spec{
//		Name: "nightly", Workflow: "reconcile", Cron: "0 2 * * *",
//		TimeZone: "Europe/Berlin", Input: json.RawMessage(`{"full": true}`),
//	}, "ana")
//	if errors.Is(err, schedule.ErrBadSpec) {
//		// err names the field and value: `time zone "Mars/Base": unknown (...)`
//	}
//
// A scheduler process fires them with a Firer over the client of the
// deployment (pkg/client), calling FireDue every few seconds:
//
//	f := schedule.NewFirer(st, cl)
//	for {
//		rep, err := f.FireDue(ctx, time.Now())
//		// log rep.Fires (started, skipped, failed) and err
//		wait := time.Until(rep.Next)
//		if rep.Next.IsZero() || wait > 5*time.Second {
//			wait = 5 * time.Second // see what other processes changed
//		}
//		select {
//		case <-ctx.Done():
//			return nil
//		case <-time.After(wait):
//		}
//	}
//
// and `durable schedule trigger NAME --by ana` is
// f.Trigger(ctx, name, time.Now(), schedule.By("ana")).
//
// The policies (see Spec): a fire whose schedule's previous run has not
// ended is skipped (OverlapSkip, the default), started beside it
// (OverlapAllow), or started after cancelling it (OverlapCancelPrevious).
// Fires missed while no firer ran are owed within the catch-up window
// (default 24h): only the newest (CatchUpLast, the default) or each of
// them (CatchUpAll). A new or resumed schedule owes no earlier fire.
//
// Several firers at once are safe: a fire is decided once, by a
// compare-and-set on the schedule's record, and carried out with
// idempotent calls (client.Start by the fire's run id), so each fire
// starts one run and is reported by one firer (see Firer).
package schedule
