package service

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// redisLogger sends go-redis's own messages (pool dial failures during an
// outage) to our JSON log instead of raw lines on stderr.
type redisLogger struct{ log zerolog.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Warn().Str("source", "go-redis").Msg(strings.TrimSpace(fmt.Sprintf(format, v...)))
}

// UseRedisLogger routes go-redis's logging (a process-wide setting) to log.
func UseRedisLogger(log zerolog.Logger) { redis.SetLogger(redisLogger{log: log}) }
