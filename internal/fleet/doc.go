// Package fleet runs durable's servers as clusters of processes on one
// machine, without containers, for tests: a JetStream cluster of
// nats-server processes (StartNATSCluster) and a Redis Cluster of
// redis-server processes, primaries and replicas (StartRedisCluster), all
// on 127.0.0.1, whose nodes a test can SIGKILL and start again on their
// data, and which are stopped at cleanup.
package fleet
