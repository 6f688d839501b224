package main

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// work is what the servers counted themselves: unlike CPU time, these
// counts do not move with the machine's speed, so a change in the work a
// turn asks for shows from one run to the next.
type work map[string]float64

// Keys of work, in the order the summary prints them.
var workKeys = []string{"pg_transactions", "pg_rows_inserted", "pg_rows_updated", "pg_rows_deleted", "redis_commands"}

// readWork reads the counters of the shape's database (pg_stat_database)
// and the Redis server (INFO commandstats, every client's). A counter that
// cannot be read is left out.
func (s *system) readWork(ctx context.Context) work {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	w := work{}
	if c, err := connectPG(ctx, s.dbURL); err == nil {
		var xacts, ins, upd, del int64
		err := c.QueryRow(ctx, `SELECT xact_commit + xact_rollback, tup_inserted, tup_updated, tup_deleted
			FROM pg_stat_database WHERE datname = current_database()`).Scan(&xacts, &ins, &upd, &del)
		if err == nil {
			w["pg_transactions"], w["pg_rows_inserted"], w["pg_rows_updated"], w["pg_rows_deleted"] =
				float64(xacts), float64(ins), float64(upd), float64(del)
		}
		_ = c.Close(context.Background())
	}
	if opts, err := redis.ParseURL(s.o.redisURL); err == nil {
		rdb := redis.NewClient(opts)
		if info, err := rdb.Info(ctx, "commandstats").Result(); err == nil {
			w["redis_commands"] = float64(commandCalls(info))
		}
		_ = rdb.Close()
	}
	return w
}

// commandCalls sums the calls of every command in INFO commandstats
// ("cmdstat_get:calls=12,usec=…").
func commandCalls(info string) int64 {
	var n int64
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		_, stats, _ := strings.Cut(line, ":")
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				if c, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
					n += c
				}
			}
		}
	}
	return n
}

// perTurn is the work done between before and after, per turn.
func (after work) perTurn(before work, turns int64) map[string]float64 {
	if turns <= 0 {
		return nil
	}
	out := map[string]float64{}
	for k, v := range after {
		if b, ok := before[k]; ok {
			out[k] = round2((v - b) / float64(turns))
		}
	}
	return out
}

// formatWork is one summary line's parts, in workKeys order.
func formatWork(m map[string]float64) string {
	var parts []string
	for _, k := range workKeys {
		if v, ok := m[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %.2f", strings.ReplaceAll(k, "_", " "), v))
		}
	}
	return strings.Join(parts, ", ")
}
