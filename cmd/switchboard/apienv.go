package main

func init() {
	// Hermes's names for the API gateway's other settings (API_SERVER_KEY
	// is with the conventional names): a comma-separated list of browser
	// origins ("*" for any), and the model id /v1/models lists.
	envAliases["API_SERVER_CORS_ORIGINS"] = "gateways.api.cors_origins"
	envAliases["API_SERVER_MODEL_NAME"] = "gateways.api.model"
}
