package bench

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/nats-io/nats-server/v2/server"
)

// StepCost is what one step costs the servers, averaged over a
// throughput phase: the commands Redis ran and the bytes it read and
// wrote, the messages and bytes nats-server took in and sent out. A run's
// start is spread over its nine steps. The bench's own watching is taken
// out: its ack watcher's deliveries (one per step) are subtracted, and it
// reads no store during the phase.
type StepCost struct {
	// RedisCommands per step, and by command (lower-case, as INFO
	// commandstats names them; "evalsha", "multi", "exec", ...).
	RedisCommands   float64            `json:"redis_commands"`
	RedisByCommand  map[string]float64 `json:"redis_by_command,omitempty"`
	RedisNetInBytes float64            `json:"redis_net_in_bytes"`
	RedisNetOutByte float64            `json:"redis_net_out_bytes"`
	NATSInMsgs      float64            `json:"nats_in_msgs"`
	NATSOutMsgs     float64            `json:"nats_out_msgs"`
	NATSInBytes     float64            `json:"nats_in_bytes"`
	NATSOutBytes    float64            `json:"nats_out_bytes"`
}

// costSample is a snapshot of the counters StepCost is made of.
type costSample struct {
	redisCalls               map[string]int64
	redisIn, redisOut        int64
	natsIn, natsOut          int64
	natsInBytes, natsOutByte int64
	watchMsgs, watchBytes    uint64
}

// costSample reads the servers' counters. Errors leave a counter at zero:
// the cost is a report, not a check.
func (b *Bench) costSample(ctx context.Context) costSample {
	s := costSample{redisCalls: map[string]int64{}}
	if b.rdb != nil {
		if info, err := b.rdb.Info(ctx, "commandstats").Result(); err == nil {
			s.redisCalls = parseCommandStats(info)
		}
		if info, err := b.rdb.Info(ctx, "stats").Result(); err == nil {
			fields := infoFields(info)
			s.redisIn, _ = strconv.ParseInt(fields["total_net_input_bytes"], 10, 64)
			s.redisOut, _ = strconv.ParseInt(fields["total_net_output_bytes"], 10, 64)
		}
	}
	if v, err := b.srv.NATS.Varz(&server.VarzOptions{}); err == nil {
		s.natsIn, s.natsOut, s.natsInBytes, s.natsOutByte = v.InMsgs, v.OutMsgs, v.InBytes, v.OutBytes
	}
	if b.watchNC != nil {
		st := b.watchNC.Stats()
		s.watchMsgs, s.watchBytes = st.InMsgs, st.InBytes
	}
	return s
}

// perStep is the cost of steps steps between before and s.
func (s costSample) perStep(before costSample, steps int) StepCost {
	n := float64(steps)
	c := StepCost{RedisByCommand: map[string]float64{}}
	var total int64
	for cmd, calls := range s.redisCalls {
		d := calls - before.redisCalls[cmd]
		if d <= 0 || cmd == "info" {
			continue
		}
		total += d
		c.RedisByCommand[cmd] = float64(d) / n
	}
	c.RedisCommands = float64(total) / n
	c.RedisNetInBytes = float64(s.redisIn-before.redisIn) / n
	c.RedisNetOutByte = float64(s.redisOut-before.redisOut) / n
	c.NATSInMsgs = float64(s.natsIn-before.natsIn) / n
	c.NATSInBytes = float64(s.natsInBytes-before.natsInBytes) / n
	c.NATSOutMsgs = float64(s.natsOut-before.natsOut-int64(s.watchMsgs-before.watchMsgs)) / n
	c.NATSOutBytes = float64(s.natsOutByte-before.natsOutByte-int64(s.watchBytes-before.watchBytes)) / n
	if len(c.RedisByCommand) == 0 {
		c.RedisByCommand = nil
	}
	return c
}

// parseCommandStats reads INFO commandstats: "cmdstat_evalsha:calls=12,...".
func parseCommandStats(info string) map[string]int64 {
	out := map[string]int64{}
	for name, v := range infoFields(info) {
		cmd, ok := strings.CutPrefix(name, "cmdstat_")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(v, ",") {
			if calls, ok := strings.CutPrefix(kv, "calls="); ok {
				out[cmd], _ = strconv.ParseInt(calls, 10, 64)
			}
		}
	}
	return out
}

// infoFields splits an INFO reply into its name:value lines.
func infoFields(info string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out
}

// averageCost is the mean of the phases' costs, weighted by their steps.
func averageCost(tps []Throughput) *StepCost {
	var steps int
	sum := StepCost{RedisByCommand: map[string]float64{}}
	for _, tp := range tps {
		if tp.Cost != nil {
			steps += tp.Steps
			sum.addScaled(*tp.Cost, float64(tp.Steps))
		}
	}
	if steps == 0 {
		return nil
	}
	avg := StepCost{RedisByCommand: map[string]float64{}}
	avg.addScaled(sum, 1/float64(steps))
	if len(avg.RedisByCommand) == 0 {
		avg.RedisByCommand = nil
	}
	return &avg
}

// addScaled adds o times w to c.
func (c *StepCost) addScaled(o StepCost, w float64) {
	c.RedisCommands += o.RedisCommands * w
	for k, v := range o.RedisByCommand {
		c.RedisByCommand[k] += v * w
	}
	c.RedisNetInBytes += o.RedisNetInBytes * w
	c.RedisNetOutByte += o.RedisNetOutByte * w
	c.NATSInMsgs += o.NATSInMsgs * w
	c.NATSOutMsgs += o.NATSOutMsgs * w
	c.NATSInBytes += o.NATSInBytes * w
	c.NATSOutBytes += o.NATSOutBytes * w
}

// writeCosts prints the per-step cost table.
func (r *Report) writeCosts(b *strings.Builder) error {
	var any bool
	for _, res := range r.Results {
		any = any || res.PerStep != nil
	}
	if !any {
		return nil
	}
	b.WriteString("cost of one step on the servers (throughput phases; a run's start spread over its 9 steps):\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\tredis cmds\tredis in B\tredis out B\tnats msgs in\tnats msgs out\tnats in B\tnats out B\tredis commands by name\t")
	for _, res := range r.Results {
		c := res.PerStep
		if c == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.0f\t%.0f\t%.2f\t%.2f\t%.0f\t%.0f\t%s\t\n", res.System, c.RedisCommands, c.RedisNetInBytes, c.RedisNetOutByte,
			c.NATSInMsgs, c.NATSOutMsgs, c.NATSInBytes, c.NATSOutBytes, byCommand(c.RedisByCommand))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b.WriteString("\n")
	return nil
}

// byCommand lists commands by calls per step, most first.
func byCommand(m map[string]float64) string {
	type kv struct {
		k string
		v float64
	}
	var l []kv
	for k, v := range m {
		if v >= 0.005 {
			l = append(l, kv{k, v})
		}
	}
	sort.Slice(l, func(i, j int) bool { return l[i].v > l[j].v || l[i].v == l[j].v && l[i].k < l[j].k })
	parts := make([]string, len(l))
	for i, e := range l {
		parts[i] = fmt.Sprintf("%s %.2f", e.k, e.v)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
