package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

var (
	// ErrNotFound: no schedule of that name.
	ErrNotFound = errors.New("no such schedule")
	// ErrExists: Create found a schedule of that name.
	ErrExists = errors.New("schedule exists")
	// ErrTooMany: the store holds StoreOptions.MaxSchedules schedules.
	ErrTooMany = errors.New("too many schedules")
)

// errConflict: the schedule changed since it was read (its KV revision
// moved); read it again.
var errConflict = errors.New("schedule changed concurrently")

// StoreOptions configures a Store. Zero values take the defaults documented.
type StoreOptions struct {
	// Bucket is the JetStream KV bucket. Default "durable_schedules".
	Bucket string
	// Replicas of the bucket when NewStore creates it. Default 1; use 3
	// on a JetStream cluster. An existing bucket keeps its own.
	Replicas int
	// MaxSchedules bounds the schedules the store keeps: Create refuses
	// one more with ErrTooMany. Creates at the same moment may each find
	// room, and pass it by their number. Default 10,000.
	MaxSchedules int
}

// Store keeps schedules in a JetStream KV bucket, one key per schedule
// ("s.<name>", JSON), whichever checkpoint store the runs are in: every
// deployment has NATS. Every change is a compare-and-set on the key's
// revision, so any number of processes may share it.
type Store struct {
	kv  jetstream.KeyValue
	max int
	// ttl: the bucket allows marker TTLs, and Delete's purge markers go
	// after a minute instead of staying for good.
	ttl bool
	// now is the clock of creates, pauses and resumes (tests set it).
	now func() time.Time
}

// storeTimeout bounds a listing when the caller's ctx has no deadline.
const storeTimeout = 30 * time.Second

// NewStore binds the bucket, creating it when missing (history 1: the
// newest value of each key is all that is read). It is safe to call from
// many processes at once.
func NewStore(ctx context.Context, js jetstream.JetStream, opts StoreOptions) (*Store, error) {
	if opts.Bucket == "" {
		opts.Bucket = "durable_schedules"
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.MaxSchedules == 0 {
		opts.MaxSchedules = 10_000
	}
	if opts.Replicas < 0 || opts.MaxSchedules < 0 {
		return nil, errors.New("schedule store: Replicas and MaxSchedules must not be negative")
	}
	kv, err := js.KeyValue(ctx, opts.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = createBucket(ctx, js, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("schedule bucket %s: %w", opts.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("schedule bucket %s: %w", opts.Bucket, err)
	}
	return &Store{kv: kv, max: opts.MaxSchedules, ttl: st.LimitMarkerTTL() > 0, now: time.Now}, nil
}

func createBucket(ctx context.Context, js jetstream.JetStream, opts StoreOptions) (jetstream.KeyValue, error) {
	cfg := jetstream.KeyValueConfig{
		Bucket:      opts.Bucket,
		Description: "durable schedules (pkg/schedule)",
		History:     1,
		Replicas:    opts.Replicas,
		// Message TTLs, for the purge markers of deleted schedules.
		LimitMarkerTTL: time.Second,
	}
	kv, err := js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported) { // a server before 2.11
		cfg.LimitMarkerTTL = 0
		kv, err = js.CreateKeyValue(ctx, cfg)
	}
	if errors.Is(err, jetstream.ErrBucketExists) { // another process was first
		return js.KeyValue(ctx, opts.Bucket)
	}
	return kv, err
}

func key(name string) string { return "s." + name }

// record is a schedule as stored: with the fire a firer decided and may
// not have carried out yet (firer.go).
type record struct {
	Schedule
	Pending *pending `json:"pending,omitempty"`
}

// pending is a fire decided and stored whose run may not be started yet.
type pending struct {
	At      time.Time `json:"at"`
	RunID   string    `json:"run_id"`
	Trigger bool      `json:"trigger,omitempty"`
	// By is who triggered it (Fire.By); records of earlier releases have
	// none, and their runs are started by "schedule:<name>".
	By string `json:"by,omitempty"`
	// Cancel is the previous run to cancel first (OverlapCancelPrevious).
	Cancel string `json:"cancel,omitempty"`
}

// Create stores a new schedule from spec, validated (ErrBadSpec) and with
// its defaults spelled out, recording by as its creator. It owes no fire
// before now. A schedule of the same name is ErrExists; a full store
// ErrTooMany.
func (s *Store) Create(ctx context.Context, spec Spec, by string) (Schedule, error) {
	sp, err := spec.normalize()
	if err != nil {
		return Schedule{}, err
	}
	n, err := s.count(ctx)
	if err != nil {
		return Schedule{}, fmt.Errorf("create schedule %s: count schedules: %w", sp.Name, err)
	}
	if n >= s.max {
		return Schedule{}, fmt.Errorf("create schedule %s: %w: the store keeps at most %d; delete one first", sp.Name, ErrTooMany, s.max)
	}
	now := s.now().UTC()
	r := record{Schedule: Schedule{Spec: sp, CreatedBy: by, CreatedAt: now, UpdatedBy: by, UpdatedAt: now, ActiveSince: now}}
	data, err := json.Marshal(r)
	if err != nil {
		return Schedule{}, err
	}
	rev, err := s.kv.Create(ctx, key(sp.Name), data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return Schedule{}, fmt.Errorf("create schedule %s: %w; delete it first to replace it", sp.Name, ErrExists)
	}
	if err != nil {
		return Schedule{}, fmt.Errorf("create schedule %s: %w", sp.Name, err)
	}
	r.rev = rev
	return r.Schedule, nil
}

// Get returns schedule name (ErrNotFound when there is none).
func (s *Store) Get(ctx context.Context, name string) (Schedule, error) {
	r, err := s.get(ctx, name)
	return r.Schedule, err
}

// List returns every schedule, by name.
func (s *Store) List(ctx context.Context) ([]Schedule, error) {
	rs, err := s.list(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Schedule, len(rs))
	for i, r := range rs {
		out[i] = r.Schedule
	}
	return out, nil
}

// Pause stops schedule name from firing, recording by; pausing a paused
// schedule changes nothing.
func (s *Store) Pause(ctx context.Context, name, by string) (Schedule, error) {
	return s.update(ctx, name, func(r *record) bool {
		if r.Spec.Paused {
			return false
		}
		r.Spec.Paused = true
		r.UpdatedBy, r.UpdatedAt = by, s.now().UTC()
		return true
	})
}

// Resume lets a paused schedule fire again, from now: the fires it
// missed while paused are not owed. Resuming one that is not paused
// changes nothing.
func (s *Store) Resume(ctx context.Context, name, by string) (Schedule, error) {
	return s.update(ctx, name, func(r *record) bool {
		if !r.Spec.Paused {
			return false
		}
		now := s.now().UTC()
		r.Spec.Paused = false
		r.UpdatedBy, r.UpdatedAt, r.ActiveSince = by, now, now
		return true
	})
}

// Delete removes schedule name (ErrNotFound when there is none). Its runs
// stay; a fire under way when it goes may still start its run. The name
// is free for a new schedule at once.
func (s *Store) Delete(ctx context.Context, name string) error {
	if _, err := s.get(ctx, name); err != nil {
		return err
	}
	var opts []jetstream.KVDeleteOpt
	if s.ttl {
		opts = append(opts, jetstream.PurgeTTL(time.Minute))
	}
	if err := s.kv.Purge(ctx, key(name), opts...); err != nil {
		return fmt.Errorf("delete schedule %s: %w", name, err)
	}
	return nil
}

// update applies change to schedule name and stores it, compare-and-set,
// reading it again after a conflict; a change that returns false stores
// nothing.
func (s *Store) update(ctx context.Context, name string, change func(*record) bool) (Schedule, error) {
	for {
		r, err := s.get(ctx, name)
		if err != nil || !change(&r) {
			return r.Schedule, err
		}
		err = s.put(ctx, &r)
		if errors.Is(err, errConflict) {
			continue
		}
		return r.Schedule, err
	}
}

func (s *Store) get(ctx context.Context, name string) (record, error) {
	if !validName(name) {
		return record{}, fmt.Errorf("schedule %q: %w", name, ErrNotFound)
	}
	e, err := s.kv.Get(ctx, key(name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return record{}, fmt.Errorf("schedule %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return record{}, fmt.Errorf("read schedule %s: %w", name, err)
	}
	return decode(e)
}

func decode(e jetstream.KeyValueEntry) (record, error) {
	var r record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return record{}, fmt.Errorf("decode schedule %s: %w", e.Key(), err)
	}
	r.rev = e.Revision()
	return r, nil
}

// put stores r compare-and-set on the revision it was read at
// (errConflict when it moved), and sets r's revision to the new one.
func (s *Store) put(ctx context.Context, r *record) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	rev, err := s.kv.Update(ctx, key(r.Spec.Name), data, r.rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return errConflict
	}
	if err != nil {
		return fmt.Errorf("store schedule %s: %w", r.Spec.Name, err)
	}
	r.rev = rev
	return nil
}

// list reads every schedule in one pass over the bucket (a KV watcher,
// not a read per key), by name.
func (s *Store) list(ctx context.Context) ([]record, error) {
	byName := map[string]record{}
	err := s.scan(ctx, false, func(e jetstream.KeyValueEntry) error {
		r, err := decode(e)
		if err != nil {
			return err
		}
		if old, ok := byName[r.Spec.Name]; !ok || old.rev < r.rev {
			byName[r.Spec.Name] = r
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	out := make([]record, 0, len(byName))
	for _, r := range byName {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Spec.Name < out[j].Spec.Name })
	return out, nil
}

// count counts the schedules, reading their keys only.
func (s *Store) count(ctx context.Context) (int, error) {
	keys := map[string]bool{}
	err := s.scan(ctx, true, func(e jetstream.KeyValueEntry) error {
		keys[e.Key()] = true
		return nil
	})
	return len(keys), err
}

// scan hands fn the newest entry of every schedule key (a key written
// during the scan may come twice), without values when metaOnly.
func (s *Store) scan(ctx context.Context, metaOnly bool, fn func(jetstream.KeyValueEntry) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, storeTimeout)
		defer cancel()
	}
	opts := []jetstream.WatchOpt{jetstream.IgnoreDeletes()}
	if metaOnly {
		opts = append(opts, jetstream.MetaOnly())
	}
	w, err := s.kv.Watch(ctx, "s.*", opts...)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case e := <-w.Updates():
			if e == nil { // the end of the values stored
				return nil
			}
			if err := fn(e); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// validName: a name a schedule can have (Spec.Name's rules).
func validName(name string) bool {
	return Spec{Name: name}.nameErr() == nil
}
