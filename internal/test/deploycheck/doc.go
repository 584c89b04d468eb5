// Package deploycheck has no code, only tests: they load the files under
// deploy/ with the parsers of the tools that will read them, so that a typo
// in a compose file, a manifest or a server config fails `make test`
// instead of a deployment.
//
//   - deploy/docker-compose.yml: compose-go (the loader of docker compose),
//     with its schema validation, which refuses unknown keys.
//   - deploy/k8s: every document decoded strictly into the k8s.io/api type
//     its kind names; kustomization.yaml into a strict struct of ours.
//   - deploy/nats/cluster: nats-server's own config parser, then the three
//     nodes started in-process as a JetStream cluster that must accept the
//     exported stream and consumer files through the nats CLI.
//   - deploy/nats/streams and deploy/nats/consumers: regenerated from the
//     code and compared (go test ./internal/deploycheck -update rewrites
//     them).
//   - deploy/redis/redis.conf: a real redis-server started with it and the
//     compose file's ACL user, running the store's conformance suite.
//   - deploy/Dockerfile: a light check of its stages, user and build line.
//
// Flags and environment variables named in these files are checked
// against the durable binary's -h and the Go sources.
package deploycheck
