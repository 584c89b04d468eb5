// Package service is what every long-running durable process shares, so
// that a team's own binaries behave like the reference ones: connection
// settings from flags and DURABLE_* variables (Conn: NATS URLs,
// credentials, TLS, the checkpoint store — Redis or JetStream KV — and the
// replicas of what the process creates), the JSON logger at
// DURABLE_LOG_LEVEL, readiness for /readyz, and retrying while a server is
// away (KeepTrying). pkg/workercmd and pkg/schedulercmd are built on it;
// use it directly for a command of your own that talks to durable.
//
//	fs := service.NewFlagSet("report", os.Stderr)
//	var c service.Conn
//	c.Register(fs) // --nats, --redis, --replicas, the TLS and credentials flags
//	if _, err := service.ParseArgs(fs, os.Args[1:]); err != nil {
//		os.Exit(service.ExitCode(err))
//	}
//	log := service.NewLogger(os.Stderr, "report")
//	s, err := c.Open(ctx, "durable-report", log)
//	if err != nil {
//		log.Fatal().Err(err).Msg("connect")
//	}
//	defer s.Close()
//	runs, err := client.New(s.JetStream, s.Store).List(ctx, client.ListFilter{})
//
// Secrets are never printed: not in logs, errors or the flags' help.
package service
