package telegram

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var updatesSkipped = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "switchboard_telegram_updates_skipped_total",
	Help: "Telegram updates acknowledged without an event, by reason (mention gating, unsupported kind).",
}, []string{"reason"})

func timeUnix(sec int64) time.Time { return time.Unix(sec, 0).UTC() }

func secondsDur(s int) time.Duration { return time.Duration(s) * time.Second }
