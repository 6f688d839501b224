package command

import (
	"errors"
	"strings"
)

// MoAUsage is Hermes's answer to a bare /moa (hermes_cli/moa_config.py,
// moa_usage), its last clause made true of a chat gateway: a preset is
// not picked from a model picker here, the operator configures the one
// preset (agent.moa).
const MoAUsage = "Usage: /moa <prompt>  (runs one prompt through the default MoA preset, then restores your model)"

// ErrMoAUsage is ParseMoA's error for a /moa without a prompt: the
// answer is MoAUsage, and nothing runs.
var ErrMoAUsage = errors.New("moa: no prompt")

// ParseMoA reads "/moa <prompt>" as Hermes does: the argument is always
// the prompt, whole (even a word that names a preset), with its line
// breaks; only the white space around it goes. Nothing but white space:
// ErrMoAUsage.
func ParseMoA(args string) (string, error) {
	prompt := strings.TrimSpace(args)
	if prompt == "" {
		return "", ErrMoAUsage
	}
	return prompt, nil
}
