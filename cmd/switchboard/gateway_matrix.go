package main

import (
	"context"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/services/gateway/matrix"
)

func init() {
	// Hermes's names for the Matrix gateway (MATRIX_ALLOWED_USERS is the
	// router's, as for every platform; MATRIX_HOME_ROOM is delivery's
	// home channel for Matrix).
	for env, key := range map[string]string{
		"MATRIX_HOMESERVER":          "gateways.matrix.homeserver",
		"MATRIX_ACCESS_TOKEN":        "gateways.matrix.access_token",
		"MATRIX_USER_ID":             "gateways.matrix.user_id",
		"MATRIX_PASSWORD":            "gateways.matrix.password",
		"MATRIX_DEVICE_ID":           "gateways.matrix.device_id",
		"MATRIX_REQUIRE_MENTION":     "gateways.matrix.require_mention",
		"MATRIX_FREE_RESPONSE_ROOMS": "gateways.matrix.free_response_rooms",
		"MATRIX_ALLOWED_ROOMS":       "gateways.matrix.allowed_rooms",
		"MATRIX_AUTO_THREAD":         "gateways.matrix.auto_thread",
		"MATRIX_DM_AUTO_THREAD":      "gateways.matrix.dm_auto_thread",
		"MATRIX_PROCESS_NOTICES":     "gateways.matrix.process_notices",
		"MATRIX_REACTIONS":           "gateways.matrix.reactions",
		"MATRIX_ALLOW_ROOM_MENTIONS": "gateways.matrix.allow_room_mentions",
		"MATRIX_HOME_ROOM":           "delivery.platforms.matrix.home",
	} {
		envAliases[env] = key
	}
	registerGateway("matrix", startMatrixGateway, true)
}

// startMatrixGateway builds the Matrix gateway. In dev it starts only
// when MATRIX_HOMESERVER and a token (or a user id and a password) are
// set.
func startMatrixGateway(ctx context.Context, a *app) (func(context.Context) error, error) {
	cfg := a.cfg.Gateways.Matrix
	return startChatGateway(ctx, a, "matrix", "MATRIX_HOMESERVER or MATRIX_ACCESS_TOKEN", cfg.Enabled(), cfg.Validate, func(b *bus.Bus) (chatService, error) {
		return matrix.New(cfg, matrix.Deps{Log: a.log, Bus: b, Runner: platform.Options{Attachments: a.cfg.Attachments}})
	})
}
