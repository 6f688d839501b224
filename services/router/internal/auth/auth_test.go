package auth

import (
	"context"
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

func msg(platform, chatType, chatID, userID string) *eventsv1.MessageReceived {
	return &eventsv1.MessageReceived{Source: &eventsv1.SessionSource{Platform: platform, ChatType: chatType, ChatId: chatID, UserId: userID}}
}

func TestDecide(t *testing.T) {
	pairedAlice := func(_ context.Context, platform, user string) (bool, error) {
		return platform == "telegram" && user == "alice", nil
	}
	trusted := msg("api", "dm", "c", "")
	trusted.TransportAuthenticated = true
	bot := msg("discord", "group", "g", "b1")
	bot.Source.IsBot = true
	mmBot := msg("mattermost", "channel", "c", "b2")
	mmBot.Source.IsBot = true
	gcBot := msg("google_chat", "group", "spaces/S", "users/9")
	gcBot.Source.IsBot = true
	alt := msg("signal", "dm", "c", "+1555")
	alt.Source.UserIdAlt = "uuid-1"

	tests := []struct {
		name   string
		cfg    Config
		env    []string
		ev     *eventsv1.MessageReceived
		paired Paired
		want   Decision
	}{
		{"transport trusted without user", Config{}, nil, trusted, nil, Decision{true, ReasonTransport}},
		{"nothing configured denies", Config{}, nil, msg("telegram", "dm", "1", "bob"), nil, Decision{false, ReasonNoAllowlist}},
		{"group chat allowlist from env", Config{}, []string{"TELEGRAM_GROUP_ALLOWED_CHATS=-100,-200"}, msg("telegram", "group", "-200", "eve"), nil, Decision{true, ReasonGroupChat}},
		{"group chat allowlist ignores dm", Config{}, []string{"TELEGRAM_GROUP_ALLOWED_CHATS=-100"}, msg("telegram", "dm", "-100", "eve"), nil, Decision{false, ReasonNoAllowlist}},
		{"group chat allowlist beats missing user", Config{GroupAllowedChats: map[string][]string{"telegram": {"-1"}}}, nil, msg("telegram", "group", "-1", ""), nil, Decision{true, ReasonGroupChat}},
		{"allowed bot", Config{AllowedBots: map[string][]string{"discord": {"b1"}}}, nil, bot, nil, Decision{true, ReasonAllowedBot}},
		{"bot not allowed as a bot meets allow-all (Hermes)", Config{AllowAll: map[string]bool{"discord": true}}, nil, bot, nil, Decision{true, ReasonPlatformAll}},
		{"bot not allowed as a bot meets the wildcard", Config{}, []string{"DISCORD_ALLOWED_USERS=*"}, bot, nil, Decision{true, ReasonWildcard}},
		{"bot not allowed as a bot meets its pairing", Config{}, nil, bot, func(_ context.Context, p, u string) (bool, error) { return p == "discord" && u == "b1", nil }, Decision{true, ReasonPaired}},
		{"bot not allowed as a bot meets the allowlist", Config{}, []string{"DISCORD_ALLOWED_USERS=b1"}, bot, nil, Decision{true, ReasonAllowlist}},
		{"bot not allowed anywhere", Config{}, []string{"DISCORD_ALLOWED_USERS=u9"}, bot, nil, Decision{false, ReasonNotAllowlisted}},
		{"ALLOW_BOTS=all admits bots", Config{}, []string{"DISCORD_ALLOW_BOTS=all", "DISCORD_ALLOWED_USERS=u9"}, bot, nil, Decision{true, ReasonAllowedBot}},
		{"ALLOW_BOTS=mentions admits bots", Config{}, []string{"DISCORD_ALLOW_BOTS=Mentions"}, bot, nil, Decision{true, ReasonAllowedBot}},
		{"ALLOW_BOTS=true admits bots, as the gateways read it", Config{}, []string{"DISCORD_ALLOW_BOTS=true"}, bot, nil, Decision{true, ReasonAllowedBot}},
		{"ALLOW_BOTS=false does not", Config{}, []string{"DISCORD_ALLOW_BOTS=false"}, bot, nil, Decision{false, ReasonNoAllowlist}},
		{"ALLOW_BOTS=none does not", Config{}, []string{"DISCORD_ALLOW_BOTS=none"}, bot, nil, Decision{false, ReasonNoAllowlist}},
		{"ALLOW_BOTS admits bots only", Config{}, []string{"DISCORD_ALLOW_BOTS=all"}, msg("discord", "group", "g", "u1"), nil, Decision{false, ReasonNoAllowlist}},
		{"ALLOW_BOTS is per platform", Config{}, []string{"SLACK_ALLOW_BOTS=all"}, bot, nil, Decision{false, ReasonNoAllowlist}},
		{"MATTERMOST_ALLOW_BOTS admits Mattermost bots", Config{}, []string{"MATTERMOST_ALLOW_BOTS=mentions"}, mmBot, nil, Decision{true, ReasonAllowedBot}},
		{"GOOGLE_CHAT_ALLOW_BOTS admits Google Chat apps", Config{}, []string{"GOOGLE_CHAT_ALLOW_BOTS=all"}, gcBot, nil, Decision{true, ReasonAllowedBot}},
		{"allow_bots config", Config{AllowBots: map[string]string{"Discord": "all"}}, nil, bot, nil, Decision{true, ReasonAllowedBot}},
		{"group chat wildcard", Config{}, []string{"TELEGRAM_GROUP_ALLOWED_CHATS=*"}, msg("telegram", "group", "-300", ""), nil, Decision{true, ReasonGroupChat}},
		{"group user allowlist in a group", Config{}, []string{"TELEGRAM_GROUP_ALLOWED_USERS=42"}, msg("telegram", "group", "-300", "42"), nil, Decision{true, ReasonAllowlist}},
		{"group user allowlist is not DM access", Config{}, []string{"TELEGRAM_GROUP_ALLOWED_USERS=42"}, msg("telegram", "dm", "42", "42"), nil, Decision{false, ReasonNoAllowlist}},
		{"group user allowlist miss", Config{}, []string{"TELEGRAM_GROUP_ALLOWED_USERS=42"}, msg("telegram", "group", "-300", "43"), nil, Decision{false, ReasonNotAllowlisted}},
		{"group user allowlist with chat ids (legacy)", Config{}, []string{"TELEGRAM_GROUP_ALLOWED_USERS=-300"}, msg("telegram", "group", "-300", "43"), nil, Decision{true, ReasonGroupChat}},
		{"group user allowlist is not for channels", Config{}, []string{"TELEGRAM_GROUP_ALLOWED_USERS=42"}, msg("telegram", "channel", "-300", "42"), nil, Decision{false, ReasonNoAllowlist}},
		{"group user allowlist config", Config{GroupAllowedUsers: map[string][]string{"telegram": {"42"}}}, nil, msg("telegram", "forum", "-300", "42"), nil, Decision{true, ReasonAllowlist}},
		{"platform allowlist works in groups too", Config{}, []string{"TELEGRAM_ALLOWED_USERS=42", "TELEGRAM_GROUP_ALLOWED_USERS=7"}, msg("telegram", "group", "-300", "42"), nil, Decision{true, ReasonAllowlist}},
		{"group allowlist keeps global allow-all off in groups", Config{GatewayAllowAll: true}, []string{"TELEGRAM_GROUP_ALLOWED_USERS=7"}, msg("telegram", "group", "-300", "42"), nil, Decision{false, ReasonNotAllowlisted}},
		{"signal group variable is no sender allowlist", Config{}, []string{"SIGNAL_GROUP_ALLOWED_USERS=grp", "GATEWAY_ALLOW_ALL_USERS=true"}, msg("signal", "dm", "1", "+1555"), nil, Decision{true, ReasonGatewayAll}},
		{"no user id denied before allow-all", Config{}, []string{"TELEGRAM_ALLOW_ALL_USERS=true"}, msg("telegram", "dm", "1", ""), nil, Decision{false, ReasonNoUserID}},
		{"platform allow-all env", Config{}, []string{"TELEGRAM_ALLOW_ALL_USERS=yes"}, msg("telegram", "dm", "1", "bob"), nil, Decision{true, ReasonPlatformAll}},
		{"platform allow-all false", Config{}, []string{"TELEGRAM_ALLOW_ALL_USERS=false"}, msg("telegram", "dm", "1", "bob"), nil, Decision{false, ReasonNoAllowlist}},
		{"platform allow-all is per platform", Config{}, []string{"DISCORD_ALLOW_ALL_USERS=1"}, msg("telegram", "dm", "1", "bob"), nil, Decision{false, ReasonNoAllowlist}},
		{"paired", Config{}, nil, msg("telegram", "dm", "1", "alice"), pairedAlice, Decision{true, ReasonPaired}},
		{"paired before allowlist miss", Config{AllowedUsers: map[string][]string{"telegram": {"carol"}}}, nil, msg("telegram", "dm", "1", "alice"), pairedAlice, Decision{true, ReasonPaired}},
		{"platform allowlist env", Config{}, []string{"TELEGRAM_ALLOWED_USERS= 12, 99 "}, msg("telegram", "dm", "1", "99"), nil, Decision{true, ReasonAllowlist}},
		{"platform allowlist miss", Config{}, []string{"TELEGRAM_ALLOWED_USERS=12"}, msg("telegram", "dm", "1", "99"), nil, Decision{false, ReasonNotAllowlisted}},
		{"global allowlist", Config{}, []string{"GATEWAY_ALLOWED_USERS=99"}, msg("slack", "dm", "1", "99"), nil, Decision{true, ReasonAllowlist}},
		{"config allowlist", Config{AllowedUsers: map[string][]string{"Slack": {"U1"}}}, nil, msg("slack", "dm", "1", "U1"), nil, Decision{true, ReasonAllowlist}},
		{"wildcard", Config{}, []string{"DISCORD_ALLOWED_USERS=*"}, msg("discord", "dm", "1", "x"), nil, Decision{true, ReasonWildcard}},
		{"email local part", Config{}, []string{"EMAIL_ALLOWED_USERS=jane"}, msg("email", "dm", "1", "jane@example.com"), nil, Decision{true, ReasonAllowlist}},
		{"email full address", Config{}, []string{"EMAIL_ALLOWED_USERS=jane@example.com"}, msg("email", "dm", "1", "jane@example.com"), nil, Decision{true, ReasonAllowlist}},
		{"email address listed in another case", Config{}, []string{"EMAIL_ALLOWED_USERS=Jane@Example.COM"}, msg("email", "dm", "1", "jane@example.com"), nil, Decision{true, ReasonAllowlist}},
		{"email local part listed in another case", Config{}, []string{"EMAIL_ALLOWED_USERS=JANE"}, msg("email", "dm", "1", "jane@example.com"), nil, Decision{true, ReasonAllowlist}},
		{"other platforms compare exactly", Config{}, []string{"SLACK_ALLOWED_USERS=u123"}, msg("slack", "dm", "1", "U123"), nil, Decision{false, ReasonNotAllowlisted}},
		{"alt user id", Config{}, []string{"SIGNAL_ALLOWED_USERS=uuid-1"}, alt, nil, Decision{true, ReasonAllowlist}},
		{"whatsapp canonical number", Config{}, []string{"WHATSAPP_ALLOWED_USERS=15551234567"}, msg("whatsapp", "dm", "1", "+15551234567:12@s.whatsapp.net"), nil, Decision{true, ReasonAllowlist}},
		{"global allow-all without allowlists", Config{}, []string{"GATEWAY_ALLOW_ALL_USERS=true"}, msg("telegram", "dm", "1", "bob"), nil, Decision{true, ReasonGatewayAll}},
		{"allowlist wins over global allow-all (Hermes)", Config{GatewayAllowAll: true}, []string{"TELEGRAM_ALLOWED_USERS=12"}, msg("telegram", "dm", "1", "bob"), nil, Decision{false, ReasonNotAllowlisted}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := New(tt.cfg, tt.env).Decide(context.Background(), tt.ev, tt.paired)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestNoAllowlist(t *testing.T) {
	tests := []struct {
		cfg  Config
		env  []string
		want bool
	}{
		{Config{}, nil, true},
		{Config{}, []string{"PATH=/bin", "TELEGRAM_ALLOWED_USERS="}, true},
		{Config{}, []string{"TELEGRAM_ALLOWED_USERS=1"}, false},
		{Config{}, []string{"GATEWAY_ALLOW_ALL_USERS=true"}, false},
		{Config{AllowAll: map[string]bool{"slack": true}}, nil, false},
		{Config{GatewayAllowedUsers: []string{"x"}}, nil, false},
		{Config{}, []string{"TELEGRAM_GROUP_ALLOWED_USERS=42"}, false},
		{Config{}, []string{"SIGNAL_GROUP_ALLOWED_USERS=grp"}, true}, // the Signal gateway's group list
	}
	for i, tt := range tests {
		if got := New(tt.cfg, tt.env).NoAllowlist(); got != tt.want {
			t.Errorf("%d: NoAllowlist = %v, want %v", i, got, tt.want)
		}
	}
}

func TestUnauthorizedDM(t *testing.T) {
	tests := []struct {
		name     string
		cfg      Config
		env      []string
		platform string
		want     string
	}{
		{"open gateway: a pairing code", Config{}, nil, "telegram", DMPair},
		{"the platform's allowlist: silence", Config{}, []string{"TELEGRAM_ALLOWED_USERS=1"}, "telegram", DMIgnore},
		{"another platform's allowlist does not count", Config{}, []string{"DISCORD_ALLOWED_USERS=1"}, "telegram", DMPair},
		{"a group chat allowlist counts", Config{}, []string{"TELEGRAM_GROUP_ALLOWED_CHATS=-100"}, "telegram", DMIgnore},
		{"a group user allowlist counts", Config{}, []string{"TELEGRAM_GROUP_ALLOWED_USERS=42"}, "telegram", DMIgnore},
		{"the gateway allowlist counts everywhere", Config{GatewayAllowedUsers: []string{"a"}}, nil, "slack", DMIgnore},
		{"the global setting wins over the allowlist", Config{UnauthorizedDMBehavior: DMPair}, []string{"TELEGRAM_ALLOWED_USERS=1"}, "telegram", DMPair},
		{"the platform's setting wins over the global one", Config{UnauthorizedDMBehavior: DMPair,
			PlatformUnauthorizedDMBehavior: map[string]string{"Telegram": DMIgnore}}, nil, "telegram", DMIgnore},
		{"email is never answered unasked", Config{UnauthorizedDMBehavior: DMPair}, nil, "email", DMIgnore},
		{"unless its own setting says so", Config{PlatformUnauthorizedDMBehavior: map[string]string{"email": DMPair}}, nil, "email", DMPair},
	}
	for _, tt := range tests {
		if got := New(tt.cfg, tt.env).UnauthorizedDM(tt.platform); got != tt.want {
			t.Errorf("%s: UnauthorizedDM(%s) = %s, want %s", tt.name, tt.platform, got, tt.want)
		}
	}
	if err := (Config{UnauthorizedDMBehavior: "reply"}).Validate(); err == nil {
		t.Error("an unknown behaviour validates")
	}
	if err := (Config{AllowBots: map[string]string{"discord": "sometimes"}}).Validate(); err == nil {
		t.Error("an unknown allow_bots value validates")
	}
	if err := (Config{AllowBots: map[string]string{"discord": "Mentions", "slack": "none", "mattermost": "true"}}).Validate(); err != nil {
		t.Errorf("valid allow_bots: %v", err)
	}
}
