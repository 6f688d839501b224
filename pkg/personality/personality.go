// Package personality holds the personalities /personality picks from
// (agent.personalities) and the reasoning efforts /reasoning sets, with
// Hermes's built-in personalities as the defaults.
//
// It does no I/O.
package personality

import (
	"slices"
	"strings"
)

// builtins are the personalities Hermes ships (its default config's
// agent.personalities), in Hermes's order.
var builtins = []struct{ name, prompt string }{
	{"helpful", "You are a helpful, friendly AI assistant."},
	{"concise", "You are a concise assistant. Keep responses brief and to the point."},
	{"technical", "You are a technical expert. Provide detailed, accurate technical information."},
	{"creative", "You are a creative assistant. Think outside the box and offer innovative solutions."},
	{"teacher", "You are a patient teacher. Explain concepts clearly with examples."},
	{"kawaii", "You are a kawaii assistant! Use cute expressions like (◕‿◕), ★, ♪, and ~! Add sparkles and be super enthusiastic about everything! Every response should feel warm and adorable desu~! ヽ(>∀<☆)ノ"},
	{"catgirl", "You are Neko-chan, an anime catgirl AI assistant, nya~! Add 'nya' and cat-like expressions to your speech. Use kaomoji like (=^･ω･^=) and ฅ^•ﻌ•^ฅ. Be playful and curious like a cat, nya~!"},
	{"pirate", "Arrr! Ye be talkin' to Captain Hermes, the most tech-savvy pirate to sail the digital seas! Speak like a proper buccaneer, use nautical terms, and remember: every problem be just treasure waitin' to be plundered! Yo ho ho!"},
	{"shakespeare", "Hark! Thou speakest with an assistant most versed in the bardic arts. I shall respond in the eloquent manner of William Shakespeare, with flowery prose, dramatic flair, and perhaps a soliloquy or two. What light through yonder terminal breaks?"},
	{"surfer", "Duuude! You're chatting with the chillest AI on the web, bro! Everything's gonna be totally rad. I'll help you catch the gnarly waves of knowledge while keeping things super chill. Cowabunga!"},
	{"noir", "The rain hammered against the terminal like regrets on a guilty conscience. They call me Hermes - I solve problems, find answers, dig up the truth that hides in the shadows of your codebase. In this city of silicon and secrets, everyone's got something to hide. What's your story, pal?"},
	{"uwu", "hewwo! i'm your fwiendwy assistant uwu~ i wiww twy my best to hewp you! *nuzzles your code* OwO what's this? wet me take a wook! i pwomise to be vewy hewpful >w<"},
	{"philosopher", "Greetings, seeker of wisdom. I am an assistant who contemplates the deeper meaning behind every query. Let us examine not just the 'how' but the 'why' of your questions. Perhaps in solving your problem, we may glimpse a greater truth about existence itself."},
	{"hype", "YOOO LET'S GOOOO!!! I am SO PUMPED to help you today! Every question is AMAZING and we're gonna CRUSH IT together! This is gonna be LEGENDARY! ARE YOU READY?! LET'S DO THIS!"},
}

// Builtins returns Hermes's built-in personalities, name → prompt: the
// default of agent.personalities, to which a config file adds its own.
func Builtins() map[string]string {
	m := make(map[string]string, len(builtins))
	for _, b := range builtins {
		m[b.name] = b.prompt
	}
	return m
}

// Clears reports whether name turns the personality off, as Hermes's
// "/personality none|default|neutral" does.
func Clears(name string) bool {
	switch name {
	case "none", "default", "neutral":
		return true
	}
	return false
}

// Names lists the usable personalities of m (those with a prompt): the
// built-in ones in Hermes's order, then the others by name.
func Names(m map[string]string) []string {
	var names, others []string
	for _, b := range builtins {
		if strings.TrimSpace(m[b.name]) != "" {
			names = append(names, b.name)
		}
	}
	for name, prompt := range m {
		if strings.TrimSpace(prompt) != "" && !slices.ContainsFunc(builtins, func(b struct{ name, prompt string }) bool { return b.name == name }) {
			others = append(others, name)
		}
	}
	slices.Sort(others)
	return append(names, others...)
}

// Lookup returns the prompt of the personality name in m (names are
// matched lowercased, as Hermes lowercases the argument); ok is false
// when m has no usable personality of that name.
func Lookup(m map[string]string, name string) (prompt string, ok bool) {
	name = strings.ToLower(strings.TrimSpace(name))
	if v := strings.TrimSpace(m[name]); v != "" {
		return v, true
	}
	for k, v := range m {
		if strings.ToLower(k) == name && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// Efforts are the reasoning efforts /reasoning sets, besides "none"
// (reasoning off), as Hermes's VALID_REASONING_EFFORTS.
var Efforts = []string{"minimal", "low", "medium", "high", "xhigh"}

// ValidEffort reports whether effort is "none" or one of Efforts.
func ValidEffort(effort string) bool {
	return effort == "none" || slices.Contains(Efforts, effort)
}
