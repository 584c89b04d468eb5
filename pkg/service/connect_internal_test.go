package service

import (
	"errors"
	"testing"
)

func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://worker:pw@nats:4222", "nats://***@nats:4222"},
		{"nats://token@nats:4222", "nats://***@nats:4222"},
		{"worker:pw@nats:4222", "***@nats:4222"},
		{"nats://a:pw1@h1:4222,nats://b:pw2@h2:4222,nats://h3:4222", "nats://***@h1:4222,nats://***@h2:4222,nats://h3:4222"},
		{"redis://u:p@ss@redis:6379/0", "redis://***@redis:6379/0"},
		{"rediss://:pw@redis:6380", "rediss://***@redis:6380"},
		{"unix://u:pw@/run/redis.sock", "unix://***@/run/redis.sock"},
		{"unix:///run/redis.sock", "unix:///run/redis.sock"},
	} {
		if got := RedactURL(tc.in); got != tc.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestScrub(t *testing.T) {
	c := Conn{NATSURL: "nats://w:nats-pw%40x@h:4222", RedisURL: "redis://u:redis-pw@h:6379", natsPassword: "flag-pw"}
	for _, tc := range []struct{ in, want string }{
		{`parse "nats://w:nats-pw%40x@h:4222": bad`, `parse "nats://***@h:4222": bad`},
		{`invalid port ":redis-pw" after host`, `invalid port "***" after host`},
		{`bad escape "%40"`, `bad escape "***"`},
		{"it was nats-pw@x, redis-pw and flag-pw", "it was ***, *** and ***"},
		{`nothing "secret" here`, `nothing "secret" here`},
	} {
		if got := c.scrub(errors.New(tc.in)); got != tc.want {
			t.Errorf("scrub(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
