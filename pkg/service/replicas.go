package service

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/durable-run/durable/pkg/blob/objstore"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/queue"
)

// maxReplicas is JetStream's limit on the replicas of a stream.
const maxReplicas = 5

// parseReplicas reads --replicas (env DURABLE_REPLICAS); "" is 1.
func parseReplicas(v string) (int, error) {
	if v == "" {
		return 1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxReplicas {
		return 0, Usagef("--replicas %q (env DURABLE_REPLICAS): want a number from 1 to %d: 1 on one NATS server, 3 on a three-node cluster", v, maxReplicas)
	}
	return n, nil
}

// JetStream's refusals of a stream's replica count.
const (
	// replicas > 1 not supported in non-clustered mode
	errCodeReplicasNotSupported jetstream.ErrorCode = 10074
	// no suitable peers for placement
	errCodeNoPeers jetstream.ErrorCode = 10005
	// insufficient resources
	errCodeInsufficientResources jetstream.ErrorCode = 10023
)

// replicasHint explains a stream or bucket creation that --replicas made
// the server refuse; "" for other errors.
func replicasHint(err error, replicas int) string {
	var api *jetstream.APIError
	if replicas <= 1 || !errors.As(err, &api) {
		return ""
	}
	switch api.ErrorCode {
	case errCodeReplicasNotSupported:
		return fmt.Sprintf(" (--replicas %d needs a NATS cluster of at least %d JetStream servers and this server is not clustered: use --replicas 1, env DURABLE_REPLICAS)", replicas, replicas)
	case errCodeNoPeers, errCodeInsufficientResources:
		return fmt.Sprintf(" (--replicas %d: fewer than %d JetStream servers of the cluster are up, or the cluster has fewer; retrying)", replicas, replicas)
	}
	return ""
}

// ReplicasError makes err a usage error when the server can never take
// the replica count asked for (it is not clustered), so that a service
// stops instead of retrying forever; other errors are returned as they
// are, with replicasHint's explanation when it has one.
func (c *Conn) ReplicasError(err error) error {
	if err == nil {
		return nil
	}
	var api *jetstream.APIError
	if errors.As(err, &api) && api.ErrorCode == errCodeReplicasNotSupported && c.Replicas > 1 {
		return UsageError{Msg: err.Error() + replicasHint(err, c.Replicas)}
	}
	if hint := replicasHint(err, c.Replicas); hint != "" {
		return fmt.Errorf("%w%s", err, hint)
	}
	return err
}

// OpenBlobs opens the blob store (Object Store bucket DURABLE_BLOBS),
// creating it with --replicas when it is missing.
func (c *Conn) OpenBlobs(ctx context.Context, s *Session) (*objstore.Store, error) {
	blobs, err := objstore.New(ctx, s.JetStream, objstore.Options{Replicas: c.Replicas})
	if err != nil {
		return nil, c.ReplicasError(fmt.Errorf("open the blob store (Object Store bucket %s): %w", objstore.DefaultBucket, err))
	}
	return blobs, nil
}

// OpenArchive opens the run archive (Object Store bucket
// client.ArchiveBucket), creating it with --replicas when it is missing;
// a bucket created here keeps an archive for ttl (0: for ever).
func (c *Conn) OpenArchive(ctx context.Context, s *Session, ttl time.Duration) (*objstore.Store, error) {
	archive, err := objstore.New(ctx, s.JetStream, objstore.Options{Bucket: client.ArchiveBucket, Replicas: c.Replicas, TTL: ttl,
		Description: "durable run archive: runs purged by retention, one gzipped JSON document each"})
	if err != nil {
		return nil, c.ReplicasError(fmt.Errorf("open the run archive (Object Store bucket %s): %w", client.ArchiveBucket, err))
	}
	return archive, nil
}

// WarnFewReplicas logs the streams and buckets that exist with fewer
// replicas than --replicas asks for: they are never changed by a process
// starting (an operator may have tuned them), so the operator must raise
// them (nats stream edit NAME --replicas N).
func (c *Conn) WarnFewReplicas(ctx context.Context, s *Session, log zerolog.Logger) {
	if c.Replicas <= 1 {
		return
	}
	names := []string{queue.StepStream, queue.DLQStream, queue.EventStream, "OBJ_" + objstore.DefaultBucket}
	if c.RedisURL == "" {
		names = append(names, "KV_"+c.KVBucket)
	}
	for _, name := range names {
		st, err := s.JetStream.Stream(ctx, name)
		if err != nil {
			continue // missing: created with --replicas; unreachable: reported elsewhere
		}
		if have := st.CachedInfo().Config.Replicas; have < c.Replicas {
			log.Warn().Str("stream", name).Int("replicas", have).Int("want", c.Replicas).
				Msgf("stream %s has %d replica(s), fewer than --replicas %d; raise it with `nats stream edit %s --replicas %d`", name, have, c.Replicas, name, c.Replicas)
		}
	}
}
