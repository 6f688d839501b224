package main

func init() {
	// Hermes's home-channel variables (its cron_deliver_env_var per
	// platform): the chat a bare platform target ("telegram") and the
	// gateway's own notices go to until a user's /sethome chooses one.
	// They are delivery's platform settings, read by the router, the
	// workers and delivery, so every one of those services needs them.
	// Mattermost, Matrix (MATRIX_HOME_ROOM), SMS and Teams declare theirs
	// beside their gateways.
	for env, platform := range map[string]string{
		"TELEGRAM_HOME_CHANNEL": "telegram",
		"DISCORD_HOME_CHANNEL":  "discord",
		"SLACK_HOME_CHANNEL":    "slack",
		"SIGNAL_HOME_CHANNEL":   "signal",
		"WHATSAPP_HOME_CHANNEL": "whatsapp",
		"EMAIL_HOME_ADDRESS":    "email",
		// an address (+15551234567, someone@icloud.com) or a chat guid
		"BLUEBUBBLES_HOME_CHANNEL": "bluebubbles",
		// a user (U…), group (C…) or room (R…) id
		"LINE_HOME_CHANNEL": "line",
		// a space (spaces/AAAA…); Hermes's platform name
		"GOOGLE_CHAT_HOME_CHANNEL": "google_chat",
	} {
		envAliases[env] = "delivery.platforms." + platform + ".home"
	}
}
