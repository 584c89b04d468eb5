package bench

import (
	"math"
	"testing"
)

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_evalsha:calls=1200,usec=3000,usec_per_call=2.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_multi:calls=9,usec=0,usec_per_call=0.00\r\ncmdstat_info:calls=3,usec=1\r\n"
	got := parseCommandStats(info)
	if got["evalsha"] != 1200 || got["multi"] != 9 || got["info"] != 3 || len(got) != 3 {
		t.Fatalf("parsed %v", got)
	}
}

// The watcher's own deliveries are not the step's cost, nor are the
// bench's INFO calls; everything is divided by the steps.
func TestPerStepSubtractsTheBench(t *testing.T) {
	before := costSample{redisCalls: map[string]int64{"evalsha": 100, "info": 5}, redisIn: 1000, redisOut: 2000,
		natsIn: 10, natsOut: 20, natsInBytes: 100, natsOutByte: 200, watchMsgs: 7, watchBytes: 70}
	after := costSample{redisCalls: map[string]int64{"evalsha": 118, "multi": 9, "info": 7}, redisIn: 10000, redisOut: 5600,
		natsIn: 46, natsOut: 65, natsInBytes: 9100, natsOutByte: 18200, watchMsgs: 16, watchBytes: 160}
	c := after.perStep(before, 9)
	want := StepCost{RedisCommands: 3, RedisNetInBytes: 1000, RedisNetOutByte: 400, NATSInMsgs: 4, NATSOutMsgs: 4, NATSInBytes: 1000, NATSOutBytes: 1990}
	if c.RedisCommands != want.RedisCommands || c.RedisNetInBytes != want.RedisNetInBytes || c.RedisNetOutByte != want.RedisNetOutByte ||
		c.NATSInMsgs != want.NATSInMsgs || c.NATSOutMsgs != want.NATSOutMsgs || c.NATSInBytes != want.NATSInBytes || c.NATSOutBytes != want.NATSOutBytes {
		t.Fatalf("cost %+v, want %+v", c, want)
	}
	if c.RedisByCommand["evalsha"] != 2 || c.RedisByCommand["multi"] != 1 || c.RedisByCommand["info"] != 0 {
		t.Fatalf("by command %v", c.RedisByCommand)
	}
	avg := averageCost([]Throughput{{Steps: 9, Cost: &c}, {Steps: 27, Cost: &StepCost{RedisCommands: 7, RedisByCommand: map[string]float64{"evalsha": 7}}}})
	if math.Abs(avg.RedisCommands-6) > 1e-9 || math.Abs(avg.RedisByCommand["evalsha"]-5.75) > 1e-9 || math.Abs(avg.NATSOutMsgs-1) > 1e-9 {
		t.Fatalf("average %+v", avg)
	}
	if averageCost([]Throughput{{Steps: 9}}) != nil {
		t.Fatal("an average of no costs")
	}
}
