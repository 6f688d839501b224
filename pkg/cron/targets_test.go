package cron_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/cron"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
)

// TestCheckDeliverLists: a deliver value may name several targets,
// separated by commas (Hermes's); each is trimmed and checked, empty ones
// dropped, origin and local in lower case.
func TestCheckDeliverLists(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in     string
		origin cron.Origin
		want   string
		fail   string
	}{
		{in: "telegram, discord:123 ,Origin", origin: tg, want: "telegram,discord:123,origin"},
		{in: "telegram:-100:17,local", want: "telegram:-100:17,local"},
		{in: " , ", origin: tg, want: "origin"},
		{in: ",", want: "local"},
		{in: "slack:#ops,,matrix:!room:example.org", want: "slack:#ops,matrix:!room:example.org"},
		{in: "telegram,Tele-gram!:1", fail: "not a platform name"},
		{in: "telegram,discord:1 2", fail: "is not a target"},
		{in: "telegram," + strings.Repeat("x", 520), fail: "is not a target"},
	} {
		got, err := cron.CheckDeliver(c.in, c.origin)
		switch {
		case c.fail != "" && (err == nil || !errors.Is(err, cron.ErrInvalid) || !strings.Contains(err.Error(), c.fail)):
			t.Errorf("CheckDeliver(%q) = %q, %v; want an error saying %q", c.in, got, err, c.fail)
		case c.fail == "" && (err != nil || got != c.want):
			t.Errorf("CheckDeliver(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

// TestTargets: as Hermes's _resolve_delivery_targets, every part of a
// deliver value resolves on its own, in order; parts that do not resolve
// are skipped (and said), a chat named twice is one target; none
// resolving is ErrBadTarget naming each; local is nowhere. A bare
// platform that is the origin's is the origin chat and thread (Hermes's
// _resolve_single_delivery_target), ahead of its home channel. A value
// stored before lists (discord:123,origin once meant the chat
// "123,origin", which no platform has) reads as its two targets.
func TestTargets(t *testing.T) {
	t.Parallel()
	homes := map[string]string{"discord": "555", "telegram": "-100777:5"}
	resolve := func(_ context.Context, raw string) (*deliveryv1.Target, error) {
		if raw == "broken" {
			return nil, errors.New("database down")
		}
		t, _, err := outbox.ParseTarget(raw, func(p string) string { return homes[p] })
		return t, err
	}
	topic := cron.Origin{Platform: "telegram", Account: "bot1", ChatID: "-100123", ThreadID: "17585"}
	str := func(ts []*deliveryv1.Target) string {
		var out []string
		for _, t := range ts {
			out = append(out, fmt.Sprintf("%s:%s:%s:%s", t.GetPlatform(), t.GetAccount(), t.GetChatId(), t.GetThreadId()))
		}
		return strings.Join(out, " ")
	}
	for _, c := range []struct {
		deliver string
		origin  cron.Origin
		want    string
		skipped int
		fail    string
	}{
		{deliver: "local"},
		{deliver: "origin", origin: topic, want: "telegram:bot1:-100123:17585"},
		{deliver: "telegram", origin: topic, want: "telegram:bot1:-100123:17585"},
		{deliver: "discord", origin: topic, want: "discord::555:"},
		{deliver: "origin", want: "telegram::-100777:5"},
		{deliver: "telegram,discord:123,origin", origin: topic, want: "telegram:bot1:-100123:17585 discord::123:"},
		{deliver: "slack, discord:9:8 ,local", origin: topic, want: "discord::9:8", skipped: 1},
		{deliver: "discord:123,origin", origin: tg, want: "discord::123: telegram:default:99:"},
		{deliver: "discord:555,discord,DISCORD:555", want: "discord::555:"},
		{deliver: "slack", fail: "no home channel for slack", skipped: 1},
		{deliver: "slack,matrix", fail: "no deliver target resolves (slack: ", skipped: 2},
		{deliver: "discord,broken", fail: "database down"},
	} {
		j := cron.Job{Deliver: c.deliver, Origin: c.origin}
		got, skipped, err := cron.Targets(context.Background(), j, resolve)
		switch {
		case c.fail != "" && (err == nil || !strings.Contains(err.Error(), c.fail)):
			t.Errorf("%q: %s, %v; want an error saying %q", c.deliver, str(got), err, c.fail)
		case c.fail == "" && (err != nil || str(got) != c.want):
			t.Errorf("%q: %q, %v; want %q", c.deliver, str(got), err, c.want)
		case len(skipped) != c.skipped:
			t.Errorf("%q: skipped %q, want %d", c.deliver, skipped, c.skipped)
		}
		if c.fail != "" && c.fail != "database down" && !errors.Is(err, outbox.ErrBadTarget) {
			t.Errorf("%q: %v is not ErrBadTarget", c.deliver, err)
		}
	}
}
