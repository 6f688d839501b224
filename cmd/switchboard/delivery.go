package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/services/delivery"
)

func init() {
	registerService(service{name: "delivery", start: startDelivery}, true)
	register(command{name: "delivery", summary: "run the delivery service (outbox, chunking, retries, rate limits)", run: func(ctx context.Context, args []string) error {
		return runServiceCommand(ctx, "delivery", args, "delivery")
	}})
	register(command{name: "deliveries", summary: "dead letters: `deliveries list|retry|purge [--all|ids]` over the admin API", run: runDeliveries})
}

func startDelivery(ctx context.Context, a *app) (func(context.Context) error, error) {
	b, db, rdb, err := a.clients(ctx)
	if err != nil {
		return nil, err
	}
	svc, err := delivery.New(a.cfg.Delivery, delivery.Deps{Log: a.log, Bus: b, DB: db, Redis: rdb, RedisPrefix: a.cfg.Redis.Prefix})
	if err != nil {
		return nil, err
	}
	if a.cfg.Delivery.GRPCAddr != "" {
		a.announce("Delivery (gRPC)", a.cfg.Delivery.GRPCAddr)
	}
	return svc.Run, nil
}

// runDeliveries is `switchboard deliveries list|retry|purge`.
func runDeliveries(ctx context.Context, args []string) error {
	return deliveriesCommand(ctx, args, os.Stdout, os.Stderr)
}

func deliveriesCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	verb, rest := subcommandOf(args)
	fs, c := adminFlags("deliveries " + verb)
	fs.SetOutput(stderr)
	all := fs.Bool("all", false, "every dead letter (retry, purge)")
	states := fs.String("state", "", "list: comma-separated states (queued, sending, sent, failed, expired); default dead letters")
	limit := fs.Int("limit", 100, "list: at most this many")
	usage := func() error {
		fmt.Fprintln(stderr, "usage: switchboard deliveries list [--state failed,expired] [--limit N]")
		fmt.Fprintln(stderr, "       switchboard deliveries retry --all | ID...")
		fmt.Fprintln(stderr, "       switchboard deliveries purge --all | ID...")
		fmt.Fprintln(stderr, "flags: --admin-addr (default 127.0.0.1:7070); token from SWITCHBOARD_ADMIN_TOKEN")
		return errUsage
	}
	switch verb {
	case "list", "retry", "purge":
	default:
		return usage()
	}
	// Flags may come after the ids, as with every admin verb.
	ids, err := parseInterleaved(fs, rest)
	if err != nil {
		return usage()
	}
	if verb == "list" && len(ids) > 0 || verb != "list" && len(ids) == 0 && !*all {
		return usage()
	}
	// As every admin verb: the token, and the operator's name for the
	// audit log, which records retry and purge.
	c.timeout = 30 * time.Second
	client, ctx, closeFn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	switch verb {
	case "list":
		req := &adminv1.ListDeliveriesRequest{Limit: int32(*limit)}
		for _, s := range strings.Split(*states, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			v, ok := deliveryv1.DeliveryState_value["DELIVERY_STATE_"+strings.ToUpper(s)]
			if !ok {
				return fmt.Errorf("%w: unknown state %q", errUsage, s)
			}
			req.States = append(req.States, deliveryv1.DeliveryState(v))
		}
		resp, err := client.ListDeliveries(ctx, req)
		if err != nil {
			return fmt.Errorf("list deliveries: %w", err)
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATE\tTARGET\tATTEMPTS\tUPDATED\tKEY\tLAST ERROR")
		for _, d := range resp.GetDeliveries() {
			t := d.GetTarget()
			target := t.GetPlatform() + ":" + t.GetChatId()
			if t.GetThreadId() != "" {
				target += ":" + t.GetThreadId()
			}
			state := strings.ToLower(strings.TrimPrefix(d.GetState().String(), "DELIVERY_STATE_"))
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", d.GetId(), state, target, d.GetAttempts(),
				d.GetUpdatedAt().AsTime().Format(time.RFC3339), d.GetIdempotencyKey(), d.GetLastError())
		}
		return tw.Flush()
	case "retry":
		resp, err := client.RetryDeliveries(ctx, &adminv1.RetryDeliveriesRequest{Ids: ids, All: *all})
		if err != nil {
			return fmt.Errorf("retry deliveries: %w", err)
		}
		fmt.Fprintf(stdout, "requeued %d\n", resp.GetRequeued())
	case "purge":
		resp, err := client.PurgeDeliveries(ctx, &adminv1.PurgeDeliveriesRequest{Ids: ids, All: *all})
		if err != nil {
			return fmt.Errorf("purge deliveries: %w", err)
		}
		fmt.Fprintf(stdout, "purged %d\n", resp.GetPurged())
	}
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
