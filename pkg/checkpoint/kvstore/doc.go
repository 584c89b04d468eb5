// Package kvstore is the JetStream KV checkpoint.Store, the default when no
// Redis is configured (`durable dev` runs on it with an embedded server).
//
// A run, each checkpoint, and each step's call journal and failures are KV
// keys; a run's revision is its key's KV revision.
//
// Commit writes the checkpoint and the run in one JetStream atomic batch
// (nats-server 2.12 or later, allow_atomic on the bucket's stream, which
// a worker's first commit turns on): cp.<R>.<n> expecting no message,
// run.<R> expecting the caller's revision, both stored or neither. A
// refused commit writes nothing, as on Redis, and a run never lags its
// checkpoint.
//
// Except on a one-replica bucket with file storage (the default of
// Options, and `durable dev`'s): nats-server stages each atomic batch of
// such a stream in a file store of its own, on disk, one batch at a time
// per stream, which holds the bucket to a few hundred commits a second
// (about 4 ms a commit, against 0.17 ms for a step's load and two writes
// on this project's test VM: BenchmarkStep). There Commit is two
// ordinary writes: the checkpoint key, then the run, compare-and-set on
// the caller's revision. A run therefore never moves before its
// checkpoint is stored; a crash between the writes leaves a run that
// lags its checkpoint, which the worker rolls forward when the step is
// delivered again. A replicated or memory bucket stages batches in
// memory, where one batch costs no more than two writes. A store also
// falls back to two writes when the server cannot take batches (no
// permission to update the stream, a server before 2.12, allow_atomic
// removed later), and a bucket written by an older version holds what
// two-write commits leave; the rules below hold either way.
//
// Every checkpoint carries its generation, Checkpoint.Gen: the run's
// Resumes when its attempt read the run. A decision on a parked run
// resumes it at the same step one generation later, so an attempt that
// began before the run parked at step n carries an older generation than
// the run it would move. The rules, all checked against the stored
// records:
//
//   - Checkpoint n is create-only within a generation: a commit that finds
//     one of its own generation or a later one writes nothing and gets
//     checkpoint.ErrCheckpointExists. One of an earlier generation is the
//     result of an attempt that no run adopted (below); the commit writes
//     over it, compare-and-set on its revision, so of several resumed
//     attempts exactly one does. A key's generation only grows.
//   - When the run write of a two-write commit loses (the run changed
//     since the caller read it), the run record decides. Running at step
//     n with Resumes equal to the checkpoint's Gen: the commit's cursor
//     fields are set on it (keeping what the other writer recorded, such
//     as an audit entry) and Commit succeeds; already moved past n in
//     that generation (a reader rolled it forward onto the checkpoint):
//     Commit succeeds with it. Anything else is checkpoint.ErrConflict
//     and the run is left alone: another generation (the run parked at
//     n, or was decided and resumed: a rejected run never walks past its
//     rejection), or cancelled, or dead.
//   - The checkpoint of a two-write commit that got ErrConflict stays. It
//     is step n's result only for a run at step n in its generation: a
//     dead run redriven at n (the worker rolls forward onto it instead of
//     running the step again), never a run resumed by a decision, whose
//     step runs again and replaces it. Load returns it as
//     Snapshot.Current either way; the worker takes it only when its Gen
//     is the run's Resumes. An atomic batch writes nothing on
//     ErrConflict, as Redis does; the conformance suite runs two-write
//     commits with checkpointtest.Options{CheckpointFirst: true} and
//     batches strict.
//
// Checkpoint keys are deleted only with their run (Purge, see
// "Retention"), never after a commit to a run that does not exist (a
// caller bug: ErrNotFound): a KV create succeeds over a delete marker, so
// a removal would reopen the key to a second, different result, should
// the read that found no run be wrong. A commit that finds its run's
// tombstone deletes the checkpoint it wrote: no run adopts it, and the
// tombstone keeps the id from a new run until the purge is long done.
//
// Load reads the run and, at the same time, the newest of the run's step
// keys (by wildcard subject): on a step's first attempt that one read
// says checkpoint n-1 is the latest and step n has nothing yet (a
// checkpoint rewritten for a later generation is its key's newest
// message, and the run only reaches step n over it). Retries and replays
// read each key. Workflows, which every run start calls, keeps the list
// and reads it again only when the newest workflow key moved.
//
// # Run indexes
//
// Listings and counts of runs (PageRuns, ListRuns by status or workflow,
// CountRuns) read an index kept beside the run records, under
// run.=ix. (index.go has the keys: inside run.>, the scheduler's and
// the approver's write permission, and matched by no pattern of the
// store). A run has one entry in the listing by creation of its workflow
// and one in its status's: the flat listing of a live status (running,
// waiting), read whole, which holds the live runs only, or the time
// listing of an ended status and its workflow. A listing of every
// workflow reads those of each workflow at once, with a wildcard for the
// workflow, so a write that creates a run or changes its status writes
// one entry for each. A time listing is a trie of directory keys over the
// entries' milliseconds, walked down newest first, so a page costs the
// directories on its path, the leaves (16 ms of entries each) that hold
// it and its runs' records, whatever the listing holds besides; a
// listing of a live status costs the live runs (BenchmarkListLive).
//
// Each write of a record says which entries are its own ("_ix": their
// time and a nonce per write), and a reader takes an entry only when the
// record names it. A status entry's time is the UpdatedAt of the write
// that set the status (as on Redis: retention's cutoff is the end a run
// shows). A write that changes the status adds the new status's entries
// and removes the old ones':
//
//   - in the atomic batch of its record, where the store sends batches
//     (with the checkpoint, for a commit): all or nothing;
//   - otherwise in three steps: the new entries, then the record
//     (compare-and-set), then the removals. A live run's entry is stored
//     before its record says it is live, so a listing of a live status
//     never misses it. A crash before the record leaves entries that no
//     record names, one after it the entries of the old status: listings
//     skip both, and remove them (by sequence, so that a later write of
//     the key stays) once the record was written after them or they are
//     two minutes old. Until then a count includes them. A refused record
//     write removes its entries itself.
//
// An entry is removed with a purge marker that rolls up its subject and
// expires after a second (message TTLs, nats-server 2.11; New creates
// the bucket with them, as `nats kv add --marker-ttl 1s` does, and a
// worker's first commit turns them on for an older bucket: an edit of
// the bucket through the KV client must keep its marker TTL, which the
// server cannot turn off). A KV delete would leave its marker for good,
// and a listing of the running runs would read a marker for every run
// that ever ran; the stream's purge and message delete APIs need a
// permission only the scheduler has, for retention (a worker must not
// purge the checkpoints).
//
// Directories are not removed by the writes that empty them: a walk
// removes those it read whole and found empty, when their time ended over
// an hour ago (trieSource), and a write of an entry stores again, after
// it, the directories on its path whose time ended ten minutes ago or
// more, so that it is never left under a removed one. EndedBefore walks
// the listings of the ended statuses, and, once a retention pass has
// found every run up to its cutoff, sweeps the others (sweep).
//
// CountRuns reads no run: it counts the live runs by reading their
// listing, and reads the counts of the ended ones from counter keys
// (counts.go): each process that moves a run into or out of an ended
// status (an end, a redrive, a purge) adds it to its own shard,
// run.=ix.c.<process>, written whole after the record (no read, no
// compare-and-set; a status change that keeps the run live, and a
// commit that keeps its status, write none), and a count is the sum of
// the base, run.=ix.c.=, and the shards: statuses × workflows ×
// processes writing, whatever the bucket holds. A crash between a record
// and its shard's write leaves a count off by the runs it moved; the
// scheduler's index maintenance recounts the entries every hour (0.4 µs
// an ended run), corrects a difference it finds twice, two minutes
// apart, and folds the shards idle for an hour into the base. A bucket
// without a base (written by a version that did not count) is counted
// by its entries until that first recount.
//
// # Retention
//
// Purge (checkpoint.Retention, which the scheduler drives) replaces an
// ended run's record with its tombstone, compare-and-set on the run's
// revision (of schedulers purging at once, one wins), then deletes every
// other key of the run: those the stream lists under "*.<R>.>" (its
// subject index, no message read: checkpoints, journals, failures, branch
// keys, spend, the audit, approval and blob logs), alive.<R> and due.<R>,
// and its index entries, its status entries last. The keys and the
// creation entries go with purge markers that roll up their subjects and
// expire after a second, published all at once (a bucket whose stream
// allows no message TTLs uses the purge API by key instead, where a
// marker would stay); the status entries with the stream's purge API by
// key (STREAM.PURGE with the key as filter), which leaves no marker (one
// would count in CountRuns until it expired). So nothing of a purged run
// stays but the tombstone; the scheduler's NATS user needs
// $JS.API.STREAM.PURGE.<stream>.
//
// The tombstone, {"_tomb": {workflow, status, ended, purged, expiry}}
// (under 100 bytes), carries a message TTL (Nats-TTL, nats-server 2.11;
// the bucket allows them, see "Run indexes"): while it is kept, GetRun
// and Load answer a *checkpoint.PurgedError, CreateRun ErrRunExists with
// it, and a commit, a branch or a failure of the run ErrNotFound; once it
// expires the id is free, with no key of the old run left to find. A
// purge that keeps none holds a tombstone without TTL while it deletes,
// and deletes it before the status entries. The record is never a marker
// during a purge, which a create would take over: no writer reopens a
// key of the run while it goes but a late one, whose commit deletes its
// checkpoint again (see above). A journal entry (RecordCall reads no
// run) or a branch result that a step begun before the run ended writes
// after the purge listed the keys stays: only a step that outlived the
// retention can write one.
//
// A purge costs, for a run of n keys (a one-step run with a model call:
// n = 2): a write of the tombstone, a listing of the run's keys (one
// STREAM.INFO with a subject filter, and on a one-replica bucket one read
// of alive and due, which on a replicated one are removed blind), a
// marker per key and for the creation entry, a purge request for the
// status entry, and a write of the entry that counts
// the tombstone (run.=ix.t.<R>, with the tombstone's TTL; Tombstones
// counts them as CountRuns counts entries), in four round trips after
// the tombstone's, and about 325 bytes of the stream kept per tombstone, once
// the walks removed the emptied directories (1,000 one-step runs on this
// project's test VM, against about 2 KB per run before). A purge that
// stops after its tombstone (a crash) leaves the run's status entries:
// EndedBefore, which reads the ended listings oldest first, finds the
// tombstone behind one and finishes the purge; the creation entries it
// cannot name go when a listing by creation reads them.
//
// A bucket written before the index has runs without entries:
// BackfillIndex (checkpoint.IndexBackfill) indexes them; any write of
// such a run indexes it too. A process of the previous version drops
// "_ix" when it writes a record: upgrade every process, then backfill.
//
// Reads on a one-replica bucket are direct gets. On a replicated bucket
// they are leader reads (STREAM.MSG.GET, which only the stream leader
// answers, once it has applied what it acknowledged): any replica
// answers a direct get, and a follower can lag, which would make a
// retry miss a journalled model call or a checkpoint. Do not give the
// bucket a mirror with mirror_direct: a mirror answers the bucket's
// direct gets too.
//
//	nc, err := nats.Connect(os.Getenv("DURABLE_NATS_URL"))
//	if err != nil {
//		return err
//	}
//	defer nc.Close()
//	js, err := jetstream.New(nc)
//	if err != nil {
//		return err
//	}
//	store, err := kvstore.New(ctx, js, kvstore.Options{Bucket: "durable", Replicas: 3})
//	if err != nil {
//		return err
//	}
//	run, err := store.CreateRun(ctx, checkpoint.Run{ID: "claim-0042", Workflow: "claim", Status: checkpoint.StatusRunning, Step: 1})
package kvstore
