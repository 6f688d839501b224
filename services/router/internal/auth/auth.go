// Package auth decides whether a sender may talk to the agent, with the
// Hermes gateway's precedence and default deny.
package auth

import (
	"context"
	"fmt"
	"slices"
	"strings"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Config is the allowlist configuration; environment variables add to it.
type Config struct {
	// AllowedUsers per platform (lowercase name); "*" allows everyone.
	AllowedUsers map[string][]string `koanf:"allowed_users"`
	// AllowAll per platform.
	AllowAll map[string]bool `koanf:"allow_all"`
	// GatewayAllowedUsers apply to every platform.
	GatewayAllowedUsers []string `koanf:"gateway_allowed_users"`
	// GatewayAllowAll admits everyone when no allowlist is configured.
	GatewayAllowAll bool `koanf:"gateway_allow_all"`
	// GroupAllowedChats per platform: every member of these group chats
	// is allowed (Hermes: TELEGRAM_GROUP_ALLOWED_CHATS).
	GroupAllowedChats map[string][]string `koanf:"group_allowed_chats"`
	// GroupAllowedUsers per platform: senders allowed in group chats only
	// (Hermes: TELEGRAM_GROUP_ALLOWED_USERS). A value starting with "-"
	// is a Telegram chat id, honoured as a group chat, as Hermes does.
	GroupAllowedUsers map[string][]string `koanf:"group_allowed_users"`
	// AllowedBots per platform: bot senders that may talk to the agent.
	AllowedBots map[string][]string `koanf:"allowed_bots"`
	// AllowBots per platform, as Hermes's <PLATFORM>_ALLOW_BOTS: "none"
	// (default), "mentions" or "all". Either of the last two admits every
	// bot the gateway publishes (the gateway applies the mention rule).
	// A bot not admitted so is checked as any other sender.
	AllowBots map[string]string `koanf:"allow_bots"`
	// UnauthorizedDMBehavior is what a DM from a sender who is not allowed
	// gets: "pair" (a pairing code) or "ignore" (silence). Empty, as in
	// Hermes: silence when an allowlist applies to the platform (the owner
	// restricted access on purpose), a pairing code otherwise.
	UnauthorizedDMBehavior string `koanf:"unauthorized_dm_behavior"`
	// PlatformUnauthorizedDMBehavior overrides it per platform.
	PlatformUnauthorizedDMBehavior map[string]string `koanf:"platform_unauthorized_dm_behavior"`
}

// The unauthorized DM behaviours.
const (
	DMPair   = "pair"
	DMIgnore = "ignore"
)

// Validate checks the behaviours.
func (c Config) Validate() error {
	check := func(key, v string) error {
		if v != "" && v != DMPair && v != DMIgnore {
			return fmt.Errorf("%s: %q is not pair or ignore", key, v)
		}
		return nil
	}
	if err := check("auth.unauthorized_dm_behavior", c.UnauthorizedDMBehavior); err != nil {
		return err
	}
	for p, v := range c.PlatformUnauthorizedDMBehavior {
		if err := check("auth.platform_unauthorized_dm_behavior."+p, v); err != nil {
			return err
		}
	}
	for p, v := range c.AllowBots {
		if _, err := platform.ParseBotMode(v); err != nil {
			return fmt.Errorf("auth.allow_bots.%s: %w", p, err)
		}
	}
	return nil
}

// Reason says why a decision was made; it is logged and counted.
type Reason string

// The reasons, in precedence order.
const (
	ReasonTransport      Reason = "transport_authenticated"
	ReasonGroupChat      Reason = "group_chat_allowlist"
	ReasonAllowedBot     Reason = "allowed_bot"
	ReasonNoUserID       Reason = "no_user_id"
	ReasonPlatformAll    Reason = "platform_allow_all"
	ReasonPaired         Reason = "paired"
	ReasonAllowlist      Reason = "allowlist"
	ReasonWildcard       Reason = "allowlist_wildcard"
	ReasonGatewayAll     Reason = "gateway_allow_all"
	ReasonNotAllowlisted Reason = "not_allowlisted"
	ReasonNoAllowlist    Reason = "no_allowlist"
)

// Decision is the outcome for one message.
type Decision struct {
	Allowed bool
	Reason  Reason
}

// Paired reports whether an operator approved the user by pairing.
type Paired func(ctx context.Context, platform, userID string) (bool, error)

// Rules is the effective configuration: config merged with environment.
type Rules struct {
	allowed     map[string][]string
	allowAll    map[string]bool
	global      []string
	globalAll   bool
	groupChats  map[string][]string
	groupUsers  map[string][]string
	allowedBots map[string][]string
	allowBots   map[string]bool // platforms whose bots are all admitted
	dmBehavior  string
	platformDM  map[string]string
}

// UnauthorizedDM is what a DM on platform from a sender who is not
// allowed gets (DMPair or DMIgnore), resolved as Hermes does: the
// platform's setting, then silence on email, then the global setting,
// then silence when an allowlist applies to the platform, else a code.
func (r *Rules) UnauthorizedDM(platform string) string {
	platform = strings.ToLower(platform)
	if b := r.platformDM[platform]; b != "" {
		return b
	}
	if platform == "email" {
		return DMIgnore // an inbox holds mail from anyone: never answer it unasked
	}
	if r.dmBehavior != "" {
		return r.dmBehavior
	}
	if len(r.allowed[platform]) > 0 || len(r.groupChats[platform]) > 0 || len(r.groupUsers[platform]) > 0 || len(r.global) > 0 {
		return DMIgnore
	}
	return DMPair
}

// New merges cfg with the Hermes environment variables found in environ
// ("KEY=value" strings): <PLATFORM>_ALLOWED_USERS, <PLATFORM>_ALLOW_ALL_USERS,
// GATEWAY_ALLOWED_USERS, GATEWAY_ALLOW_ALL_USERS,
// <PLATFORM>_GROUP_ALLOWED_CHATS, TELEGRAM_GROUP_ALLOWED_USERS,
// <PLATFORM>_ALLOWED_BOTS and <PLATFORM>_ALLOW_BOTS (the platforms Hermes
// reads it for: Discord, Feishu, Slack, Telegram; and Mattermost).
func New(cfg Config, environ []string) *Rules {
	r := &Rules{
		allowed:     map[string][]string{},
		allowAll:    map[string]bool{},
		global:      clean(cfg.GatewayAllowedUsers),
		globalAll:   cfg.GatewayAllowAll,
		groupChats:  map[string][]string{},
		groupUsers:  map[string][]string{},
		allowedBots: map[string][]string{},
		allowBots:   map[string]bool{},
		dmBehavior:  cfg.UnauthorizedDMBehavior,
		platformDM:  map[string]string{},
	}
	for p, b := range cfg.PlatformUnauthorizedDMBehavior {
		r.platformDM[strings.ToLower(p)] = b
	}
	for p, ids := range cfg.AllowedUsers {
		r.allowed[strings.ToLower(p)] = append(r.allowed[strings.ToLower(p)], clean(ids)...)
	}
	for p, v := range cfg.AllowAll {
		r.allowAll[strings.ToLower(p)] = r.allowAll[strings.ToLower(p)] || v
	}
	for p, ids := range cfg.GroupAllowedChats {
		r.groupChats[strings.ToLower(p)] = append(r.groupChats[strings.ToLower(p)], clean(ids)...)
	}
	for p, ids := range cfg.GroupAllowedUsers {
		r.groupUsers[strings.ToLower(p)] = append(r.groupUsers[strings.ToLower(p)], clean(ids)...)
	}
	for p, ids := range cfg.AllowedBots {
		r.allowedBots[strings.ToLower(p)] = append(r.allowedBots[strings.ToLower(p)], clean(ids)...)
	}
	for p, v := range cfg.AllowBots {
		r.allowBots[strings.ToLower(p)] = r.allowBots[strings.ToLower(p)] || botsAdmitted(v)
	}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(v) == "" {
			continue
		}
		switch {
		case k == "GATEWAY_ALLOWED_USERS":
			r.global = append(r.global, split(v)...)
		case k == "GATEWAY_ALLOW_ALL_USERS":
			r.globalAll = r.globalAll || truthy(v)
		case strings.HasSuffix(k, "_ALLOW_ALL_USERS"):
			p := platformOf(k, "_ALLOW_ALL_USERS")
			r.allowAll[p] = r.allowAll[p] || truthy(v)
		case strings.HasSuffix(k, "_GROUP_ALLOWED_CHATS"):
			p := platformOf(k, "_GROUP_ALLOWED_CHATS")
			r.groupChats[p] = append(r.groupChats[p], split(v)...)
		case k == "TELEGRAM_GROUP_ALLOWED_USERS":
			r.groupUsers["telegram"] = append(r.groupUsers["telegram"], split(v)...)
		case strings.HasSuffix(k, "_GROUP_ALLOWED_USERS"):
			// Other platforms' variables of this name configure their
			// gateways (SIGNAL_GROUP_ALLOWED_USERS lists groups): they
			// are not a sender allowlist of a platform "signal_group".
		case k == "DISCORD_ALLOW_BOTS", k == "FEISHU_ALLOW_BOTS", k == "SLACK_ALLOW_BOTS", k == "TELEGRAM_ALLOW_BOTS",
			k == "MATTERMOST_ALLOW_BOTS", k == "GOOGLE_CHAT_ALLOW_BOTS":
			// MATTERMOST_ALLOW_BOTS and GOOGLE_CHAT_ALLOW_BOTS are not
			// Hermes's (its adapters take every message as a person's);
			// those gateways mark bots, and read them as the others do.
			p := platformOf(k, "_ALLOW_BOTS")
			r.allowBots[p] = r.allowBots[p] || botsAdmitted(v)
		case strings.HasSuffix(k, "_ALLOWED_BOTS"):
			p := platformOf(k, "_ALLOWED_BOTS")
			r.allowedBots[p] = append(r.allowedBots[p], split(v)...)
		case strings.HasSuffix(k, "_ALLOWED_USERS"):
			p := platformOf(k, "_ALLOWED_USERS")
			r.allowed[p] = append(r.allowed[p], split(v)...)
		}
	}
	return r
}

func platformOf(envKey, suffix string) string {
	return strings.ToLower(strings.TrimSuffix(envKey, suffix))
}

// botsAdmitted reports whether an ALLOW_BOTS value admits bots. It
// reads the values the gateways read (platform.ParseBotMode: true and
// on are all, as their older boolean setting), so one variable admits
// bots at both; a value neither reads admits none here and stops the
// gateway at start.
func botsAdmitted(v string) bool {
	m, err := platform.ParseBotMode(v)
	return err == nil && m != platform.BotsNone
}

func truthy(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "1", "yes", "on":
		return true
	}
	return false
}

func split(v string) []string { return clean(strings.Split(v, ",")) }

func clean(ids []string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if id = strings.TrimSpace(id); id != "" {
			out = append(out, id)
		}
	}
	return out
}

// NoAllowlist reports whether nothing admits anyone by configuration: no
// allowlist and no allow-all anywhere (pairing is then the only way in).
func (r *Rules) NoAllowlist() bool {
	if r.globalAll || len(r.global) > 0 {
		return false
	}
	for _, ids := range r.allowed {
		if len(ids) > 0 {
			return false
		}
	}
	for _, v := range r.allowAll {
		if v {
			return false
		}
	}
	for _, ids := range r.groupChats {
		if len(ids) > 0 {
			return false
		}
	}
	for _, ids := range r.groupUsers {
		if len(ids) > 0 {
			return false
		}
	}
	return true
}

func isGroup(chatType string) bool {
	switch chatType {
	case "", "dm":
		return false
	}
	return true
}

// Decide applies Hermes's precedence: trusted transport → chat-scoped group
// allowlist ("*" for every group) → admitted bots → no user id (deny) →
// platform allow-all → approved pairing → allowlists (with "*", e-mail
// local parts, and in groups the group sender allowlist) → global
// allow-all when no allowlist exists → deny. A bot that is not admitted
// as a bot goes through the same checks as a person, as in Hermes.
func (r *Rules) Decide(ctx context.Context, ev *eventsv1.MessageReceived, paired Paired) (Decision, error) {
	if ev.GetTransportAuthenticated() || ev.GetInternal() {
		return Decision{true, ReasonTransport}, nil
	}
	src := ev.GetSource()
	platform := strings.ToLower(src.GetPlatform())
	inGroup := isGroup(src.GetChatType()) && src.GetChatId() != ""
	if inGroup && (slices.Contains(r.groupChats[platform], src.GetChatId()) || slices.Contains(r.groupChats[platform], "*")) {
		return Decision{true, ReasonGroupChat}, nil
	}
	userID := src.GetUserId()
	if src.GetIsBot() {
		if r.allowBots[platform] ||
			(userID != "" && (slices.Contains(r.allowedBots[platform], userID) || slices.Contains(r.allowedBots[platform], "*"))) {
			return Decision{true, ReasonAllowedBot}, nil
		}
	}
	if userID == "" {
		return Decision{false, ReasonNoUserID}, nil
	}
	if r.allowAll[platform] {
		return Decision{true, ReasonPlatformAll}, nil
	}
	if paired != nil {
		ok, err := paired(ctx, platform, userID)
		if err != nil {
			return Decision{}, err
		}
		if ok {
			return Decision{true, ReasonPaired}, nil
		}
	}
	list := append(slices.Clone(r.allowed[platform]), r.global...)
	var groupUsers []string
	if t := src.GetChatType(); inGroup && (t == "group" || t == "forum") {
		// As Hermes: the group sender allowlist is for group and forum
		// chats, not channels.
		groupUsers = r.groupUsers[platform]
	}
	if len(list) == 0 && len(groupUsers) == 0 && (!inGroup || len(r.groupChats[platform]) == 0) {
		if r.globalAll {
			return Decision{true, ReasonGatewayAll}, nil
		}
		return Decision{false, ReasonNoAllowlist}, nil
	}
	for _, id := range groupUsers {
		// Hermes reads chat ids ("-100…") in the group user list as
		// group chats, from before TELEGRAM_GROUP_ALLOWED_CHATS existed.
		if strings.HasPrefix(id, "-") && id == src.GetChatId() {
			return Decision{true, ReasonGroupChat}, nil
		}
	}
	list = append(list, groupUsers...)
	if slices.Contains(list, "*") {
		return Decision{true, ReasonWildcard}, nil
	}
	for _, id := range candidates(platform, src) {
		if listed(platform, list, id) {
			return Decision{true, ReasonAllowlist}, nil
		}
	}
	return Decision{false, ReasonNotAllowlisted}, nil
}

// listed reports whether id is on list. E-mail addresses are compared
// without regard to case, as Hermes does: the gateway lowercases the
// sender, and an operator may list "Ann@Example.com".
func listed(platform string, list []string, id string) bool {
	if platform != "email" {
		return slices.Contains(list, id)
	}
	return slices.ContainsFunc(list, func(e string) bool { return strings.EqualFold(e, id) })
}

// candidates are the ids a sender may be listed under: the user id, the
// alternative id, an e-mail's local part, a WhatsApp number without "+".
func candidates(platform string, src *eventsv1.SessionSource) []string {
	ids := []string{src.GetUserId()}
	if alt := src.GetUserIdAlt(); alt != "" {
		ids = append(ids, alt)
	}
	for _, id := range slices.Clone(ids) {
		if local, _, ok := strings.Cut(id, "@"); ok && local != "" {
			ids = append(ids, local)
		}
		if platform == "whatsapp" {
			c := strings.TrimPrefix(id, "+")
			if i := strings.IndexAny(c, ":@"); i >= 0 {
				c = c[:i]
			}
			if c != "" {
				ids = append(ids, c)
			}
		}
	}
	return ids
}
