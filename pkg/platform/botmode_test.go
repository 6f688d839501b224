package platform

import "testing"

func TestBotMode(t *testing.T) {
	for _, c := range []struct {
		in                   string
		want                 BotMode
		err                  bool
		mentioned, unnoticed bool // Admits(true), Admits(false)
	}{
		{in: "", want: BotsNone},
		{in: "none", want: BotsNone},
		{in: " None ", want: BotsNone},
		{in: "false", want: BotsNone},
		{in: "0", want: BotsNone},
		{in: "mentions", want: BotsMentions, mentioned: true},
		{in: "Mentions", want: BotsMentions, mentioned: true},
		{in: "all", want: BotsAll, mentioned: true, unnoticed: true},
		{in: "ALL", want: BotsAll, mentioned: true, unnoticed: true},
		{in: "true", want: BotsAll, mentioned: true, unnoticed: true},
		{in: "1", want: BotsAll, mentioned: true, unnoticed: true},
		{in: "yes-please", want: BotsNone, err: true},
	} {
		t.Run(c.in, func(t *testing.T) {
			got, err := ParseBotMode(c.in)
			if (err != nil) != c.err || got != c.want {
				t.Fatalf("ParseBotMode(%q) = %q, %v; want %q, error %v", c.in, got, err, c.want, c.err)
			}
			if got.Admits(true) != c.mentioned || got.Admits(false) != c.unnoticed {
				t.Fatalf("%q admits mentioned %v, unmentioned %v; want %v, %v", got, got.Admits(true), got.Admits(false), c.mentioned, c.unnoticed)
			}
		})
	}
}
