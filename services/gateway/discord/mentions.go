package discord

import "github.com/bwmarrin/discordgo"

// AllowMentions says which mentions in the bot's messages notify anyone
// (Discord's allowed_mentions, sent with every message and every edit).
// Without it Discord parses them all: a reply that quotes "@everyone"
// (the model's own words, or a user's echoed back) would ping the whole
// server. As Hermes's _build_allowed_mentions (gateway/platforms/
// discord.py, discord.allow_mentions.* and DISCORD_ALLOW_MENTION_*):
// @everyone, @here and role pings are off, pings of users by id and of
// the author of the message replied to are on.
type AllowMentions struct {
	// Everyone (DISCORD_ALLOW_MENTION_EVERYONE, default false): @everyone
	// and @here notify.
	Everyone bool `koanf:"everyone"`
	// Roles (DISCORD_ALLOW_MENTION_ROLES, default false): <@&role> pings
	// notify the role's members.
	Roles bool `koanf:"roles"`
	// Users (DISCORD_ALLOW_MENTION_USERS, default true): <@user> pings
	// notify the user.
	Users bool `koanf:"users"`
	// RepliedUser (DISCORD_ALLOW_MENTION_REPLIED_USER, default true): the
	// first chunk of an answer, a reply to the user's message, notifies
	// its author.
	RepliedUser bool `koanf:"replied_user"`
}

// DefaultAllowMentions is Hermes's default.
func DefaultAllowMentions() AllowMentions { return AllowMentions{Users: true, RepliedUser: true} }

// allowed is the allowed_mentions object. Parse is never nil: discordgo
// sends it as is, and an absent or null list is not "nothing".
func (a AllowMentions) allowed() *discordgo.MessageAllowedMentions {
	parse := []discordgo.AllowedMentionType{}
	if a.Everyone {
		parse = append(parse, discordgo.AllowedMentionTypeEveryone)
	}
	if a.Roles {
		parse = append(parse, discordgo.AllowedMentionTypeRoles)
	}
	if a.Users {
		parse = append(parse, discordgo.AllowedMentionTypeUsers)
	}
	return &discordgo.MessageAllowedMentions{Parse: parse, RepliedUser: a.RepliedUser}
}
