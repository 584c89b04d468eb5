package redisstore

import "github.com/durable-run/durable/pkg/checkpoint"

// IndexLua is indexLua, for a test that runs a script of a previous
// release as it was.
const IndexLua = indexLua

// IndexArgs is indexArgs: the arguments a create sends after the run's
// document.
func (s *Store) IndexArgs(args []any, run checkpoint.Run) []any { return s.indexArgs(args, run) }
