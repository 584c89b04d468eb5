package flow

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
	// ErrNotFound: no limit of that name.
	ErrNotFound = errors.New("no such limit")
	// ErrTooMany: the store holds StoreOptions.MaxLimits limits.
	ErrTooMany = errors.New("too many limits")
)

// errConflict: the record changed since it was read (its KV revision
// moved); read it again.
var errConflict = errors.New("limit changed concurrently")

// maxAttempts bounds the compare-and-set attempts of one call. Each lost
// attempt is another writer's success, so losing this many in a row means
// the limit is busier than one KV key serves.
const maxAttempts = 16

// StoreOptions configures a Store. Zero values take the defaults documented.
type StoreOptions struct {
	// Bucket is the JetStream KV bucket. Default "durable_limits".
	Bucket string
	// Replicas of the bucket when NewStore creates it. Default 1; use 3
	// on a JetStream cluster. An existing bucket keeps its own.
	Replicas int
	// MaxLimits bounds the names the store keeps of each kind, counted
	// apart: rates (rates set and slow-downs of names with no limit
	// alike), concurrency limits, concurrency limits per key and rates
	// per key. A new name of a kind past it is ErrTooMany. Writers at the
	// same moment may each find room, and pass it by their number.
	// Default 1,000.
	MaxLimits int
}

// Store keeps the limits in a JetStream KV bucket, whichever checkpoint
// store the runs are in (every deployment has NATS), a key per limit and
// kind: "l.<name>" a rate (JSON: the rate, the time of the next token and
// the slow-down), "c.<name>" a concurrency limit with the workers'
// leases, "p.<name>" a concurrency limit per key and "q.<name>" a rate
// per key, with "k.<name>.<hash>" and "t.<name>.<hash>" for each busy
// key's leases and tokens (purged or expiring when the key is idle).
// Every change is a compare-and-set on the key's revision, so any number
// of processes may share it.
type Store struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	bucket string
	max    int
	// ttl: the bucket allows per-key TTLs. A slow-down of a name with no
	// limit then goes linger after its end, and Delete's purge markers
	// after a minute, instead of staying for good.
	ttl    bool
	linger time.Duration
	// now is the clock of Set (tests set it to the time they give Take).
	now func() time.Time
}

// storeTimeout bounds a listing when the caller's ctx has no deadline.
const storeTimeout = 30 * time.Second

// NewStore binds the bucket, creating it when missing (history 1: the
// newest value of each key is all that is read). It is safe to call from
// many processes at once.
func NewStore(ctx context.Context, js jetstream.JetStream, opts StoreOptions) (*Store, error) {
	if opts.Bucket == "" {
		opts.Bucket = "durable_limits"
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.MaxLimits == 0 {
		opts.MaxLimits = 1_000
	}
	if opts.Replicas < 0 || opts.MaxLimits < 0 {
		return nil, errors.New("limit store: Replicas and MaxLimits must not be negative")
	}
	kv, err := js.KeyValue(ctx, opts.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = createBucket(ctx, js, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("limit bucket %s: %w", opts.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("limit bucket %s: %w", opts.Bucket, err)
	}
	return &Store{js: js, kv: kv, bucket: opts.Bucket, max: opts.MaxLimits,
		ttl: st.LimitMarkerTTL() > 0, linger: time.Minute, now: time.Now}, nil
}

func createBucket(ctx context.Context, js jetstream.JetStream, opts StoreOptions) (jetstream.KeyValue, error) {
	cfg := jetstream.KeyValueConfig{
		Bucket:      opts.Bucket,
		Description: "durable rate limits (pkg/flow)",
		History:     1,
		Replicas:    opts.Replicas,
		// Message TTLs, for slow-downs of names with no limit and the
		// purge markers of deleted limits.
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

// Limit is a limit as stored.
type Limit struct {
	Name string
	// Rate is the limit's pace; zero (N 0) for a name that has no limit
	// set and is only slowed down (see Store.SlowDown).
	Rate Rate
	// BlockedUntil is the end of the latest slow-down; zero if none.
	BlockedUntil time.Time
	// SetBy and SetAt: who set the rate, and when.
	SetBy string
	SetAt time.Time
}

// record is a limit as stored, with its state.
type record struct {
	name string
	rev  uint64
	rate Rate // zero: a slow-down only
	// tat is GCRA's theoretical arrival time: zero until a token is taken.
	tat          time.Time
	blockedUntil time.Time
	setBy        string
	setAt        time.Time
}

// wire is a record as JSON, readable with `nats kv get durable_limits l.<name>`.
type wire struct {
	N            int       `json:"n,omitempty"`
	Per          string    `json:"per,omitempty"` // a Go duration
	Burst        int       `json:"burst,omitempty"`
	TAT          time.Time `json:"tat,omitzero"`
	BlockedUntil time.Time `json:"blocked_until,omitzero"`
	SetBy        string    `json:"set_by,omitempty"`
	SetAt        time.Time `json:"set_at,omitzero"`
}

func key(name string) string { return "l." + name }

func (r *record) limit() Limit {
	return Limit{Name: r.name, Rate: r.rate, BlockedUntil: r.blockedUntil, SetBy: r.setBy, SetAt: r.setAt}
}

func (r *record) encode() ([]byte, error) {
	w := wire{TAT: r.tat, BlockedUntil: r.blockedUntil, SetBy: r.setBy, SetAt: r.setAt}
	if r.rate.N != 0 {
		w.N, w.Per, w.Burst = r.rate.N, r.rate.Per.String(), r.rate.Burst
	}
	return json.Marshal(w)
}

func decode(name string, e jetstream.KeyValueEntry) (record, error) {
	var w wire
	if err := json.Unmarshal(e.Value(), &w); err != nil {
		return record{}, fmt.Errorf("decode limit %s: %w", name, err)
	}
	r := record{name: name, rev: e.Revision(), tat: w.TAT, blockedUntil: w.BlockedUntil, setBy: w.SetBy, setAt: w.SetAt}
	if w.N != 0 {
		per, err := time.ParseDuration(w.Per)
		if err != nil {
			return record{}, fmt.Errorf("decode limit %s: period %q: %w", name, w.Per, err)
		}
		r.rate = Rate{N: w.N, Per: per, Burst: w.Burst}
		if err := r.rate.Validate(); err != nil {
			return record{}, fmt.Errorf("decode limit %s: %w", name, err)
		}
	}
	return r, nil
}

// Set stores name's rate, recording by as who set it. A new limit starts
// idle (a full burst); a changed rate starts afresh the same way, but a
// slow-down under way stays. Setting the rate a limit has changes
// nothing. A new name past StoreOptions.MaxLimits is ErrTooMany; a bad
// name or rate ErrBadLimit; losing 16 compare-and-sets in a row to other
// writers an error wrapping jetstream.ErrKeyRevisionMismatch.
func (s *Store) Set(ctx context.Context, name string, rate Rate, by string) (Limit, error) {
	if err := nameErr(name); err != nil {
		return Limit{}, err
	}
	if err := rate.Validate(); err != nil {
		return Limit{}, fmt.Errorf("limit %s: %w", name, err)
	}
	for attempt := range maxAttempts {
		if attempt > 0 {
			backOff(attempt)
		}
		r, err := s.get(ctx, name)
		switch {
		case errors.Is(err, ErrNotFound):
			if err := s.room(ctx, name); err != nil {
				return Limit{}, err
			}
			r = record{name: name}
			r.setRate(rate, by, s.now())
			err = s.create(ctx, &r, 0)
		case err != nil:
			return Limit{}, err
		case r.rate == rate:
			return r.limit(), nil
		default:
			// With no TTL: a slow-down only becomes a limit for good.
			r.setRate(rate, by, s.now())
			err = s.put(ctx, &r, 0)
		}
		if err == nil {
			return r.limit(), nil
		}
		if !errors.Is(err, errConflict) {
			return Limit{}, err
		}
	}
	return Limit{}, contended("set limit", name)
}

func (r *record) setRate(rate Rate, by string, now time.Time) {
	r.rate, r.setBy, r.setAt = rate, by, now.UTC()
	r.tat = time.Time{}
	if r.blockedUntil.After(r.setAt) {
		// A slow-down under way: the new rate resumes after it at its
		// pace, with no burst. One that has ended leaves a full burst.
		r.tat = resumeTAT(rate, r.blockedUntil)
	}
}

// Get returns limit name (ErrNotFound when there is none).
func (s *Store) Get(ctx context.Context, name string) (Limit, error) {
	if err := nameErr(name); err != nil {
		return Limit{}, err
	}
	r, err := s.get(ctx, name)
	return r.limit(), err
}

// List returns every limit, by name: at most about
// StoreOptions.MaxLimits, in one pass over the bucket.
func (s *Store) List(ctx context.Context) ([]Limit, error) {
	newest := map[string]record{}
	err := s.scan(ctx, false, func(e jetstream.KeyValueEntry) error {
		name := e.Key()[len(key("")):]
		r, err := decode(name, e)
		if err != nil {
			return err
		}
		if old, ok := newest[name]; !ok || old.rev < r.rev {
			newest[name] = r
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list limits: %w", err)
	}
	out := make([]Limit, 0, len(newest))
	for _, r := range newest {
		out = append(out, r.limit())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Delete removes name's rate and its state, a slow-down too
// (ErrNotFound when there is none): its calls take no token from then on.
// Its other kinds stay: DeleteConcurrency, DeleteConcurrencyPerKey and
// DeleteRatePerKey remove those.
func (s *Store) Delete(ctx context.Context, name string) error {
	return s.deleteKey(ctx, name, key(name), "limit "+name)
}

// purge removes key k, leaving a marker that expires after a minute
// when the bucket allows TTLs.
func (s *Store) purge(ctx context.Context, k, what string) error {
	var opts []jetstream.KVDeleteOpt
	if s.ttl {
		opts = append(opts, jetstream.PurgeTTL(time.Minute))
	}
	if err := s.kv.Purge(ctx, k, opts...); err != nil {
		return fmt.Errorf("delete %s: %w", what, err)
	}
	return nil
}

// entry reads key k (ErrNotFound, naming what, when it is missing).
func (s *Store) entry(ctx context.Context, k, what string) (jetstream.KeyValueEntry, error) {
	e, err := s.kv.Get(ctx, k)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	return e, nil
}

func (s *Store) get(ctx context.Context, name string) (record, error) {
	e, err := s.entry(ctx, key(name), "limit "+name)
	if err != nil {
		return record{}, err
	}
	return decode(name, e)
}

// create stores a new record (errConflict when its key exists), with a
// TTL when ttl > 0.
func (s *Store) create(ctx context.Context, r *record, ttl time.Duration) error {
	data, err := r.encode()
	if err != nil {
		return err
	}
	var opts []jetstream.KVCreateOpt
	if ttl > 0 {
		opts = append(opts, jetstream.KeyTTL(ttl))
	}
	rev, err := s.kv.Create(ctx, key(r.name), data, opts...)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return errConflict
	}
	if err != nil {
		return fmt.Errorf("store limit %s: %w", r.name, err)
	}
	r.rev = rev
	return nil
}

// put stores r compare-and-set on the revision it was read at
// (errConflict when it moved), with a TTL when ttl > 0, and sets r's
// revision to the new one.
func (s *Store) put(ctx context.Context, r *record, ttl time.Duration) error {
	data, err := r.encode()
	if err != nil {
		return err
	}
	var rev uint64
	if ttl > 0 {
		// KeyValue.Update sets no TTL: publish as it does, with one.
		var ack *jetstream.PubAck
		ack, err = s.js.Publish(ctx, "$KV."+s.bucket+"."+key(r.name), data,
			jetstream.WithExpectLastSequencePerSubject(r.rev), jetstream.WithMsgTTL(ttl))
		if ack != nil {
			rev = ack.Sequence
		}
	} else {
		rev, err = s.kv.Update(ctx, key(r.name), data, r.rev)
	}
	if isConflict(err) {
		return errConflict
	}
	if err != nil {
		return fmt.Errorf("store limit %s: %w", r.name, err)
	}
	r.rev = rev
	return nil
}

// isConflict: a compare-and-set found another revision (10071, or 10164
// on a replicated stream).
func isConflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

func contended(op, name string) error {
	return fmt.Errorf("%s %s: changed by others %d times in a row: %w", op, name, maxAttempts, jetstream.ErrKeyRevisionMismatch)
}

// room checks that one more rate fits (ErrTooMany when not).
func (s *Store) room(ctx context.Context, name string) error {
	return s.roomIn(ctx, key(""), name)
}

// roomIn checks that one more key under prefix (the rates' or the
// concurrency limits') fits: each kind holds at most MaxLimits names.
func (s *Store) roomIn(ctx context.Context, prefix, name string) error {
	names, err := s.names(ctx, prefix)
	if err != nil {
		return fmt.Errorf("limit %s: count limits: %w", name, err)
	}
	if len(names) >= s.max {
		return fmt.Errorf("limit %s: %w: the store keeps at most %d; delete one first", name, ErrTooMany, s.max)
	}
	return nil
}

// names reads the names stored under prefix, keys only.
func (s *Store) names(ctx context.Context, prefix string) (map[string]bool, error) {
	names := map[string]bool{}
	err := s.scanKeys(ctx, prefix+">", true, func(e jetstream.KeyValueEntry) error {
		names[e.Key()[len(prefix):]] = true
		return nil
	})
	return names, err
}

// scan hands fn the newest entry of every limit key (a key written
// during the scan may come twice), without values when metaOnly.
func (s *Store) scan(ctx context.Context, metaOnly bool, fn func(jetstream.KeyValueEntry) error) error {
	return s.scanKeys(ctx, key(">"), metaOnly, fn)
}
