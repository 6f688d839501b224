package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// errUsage means the command line was wrong; usage has been printed.
var errUsage = errors.New("usage")

// command is one subcommand of the binary.
type command struct {
	name    string
	summary string
	// run gets the arguments after the command name.
	run func(ctx context.Context, args []string) error
	// serves: run starts services, and tells hangups whether they hold
	// skills once it has read its config; a SIGHUP stops any other
	// command as SIGTERM does.
	serves bool
}

// commands is every subcommand, registered by the files that implement them.
var commands = map[string]command{}

func register(c command) { commands[c.name] = c }

func init() {
	register(command{name: "version", summary: "print the version", run: func(context.Context, []string) error {
		fmt.Println("switchboard", version)
		return nil
	}})
	register(command{name: "help", summary: "list commands", run: func(context.Context, []string) error {
		usage(os.Stdout)
		return nil
	}})
}

// version is set with -ldflags "-X main.version=…".
var version = "dev"

// Commands lists the subcommand names (tests check deploy files against it).
func Commands() []string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: switchboard <command> [flags]")
	fmt.Fprintln(w)
	for _, n := range Commands() {
		fmt.Fprintf(w, "  %-12s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Every command takes --config FILE (or $SWITCHBOARD_CONFIG); see the README's configuration table.")
}

func dispatch(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		usage(os.Stderr)
		return errUsage
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "switchboard: unknown command %q\n\n", args[0])
		usage(os.Stderr)
		return errUsage
	}
	if !c.serves {
		hangups.decide(false)
	}
	return c.run(ctx, args[1:])
}

// commonFlags are the flags every service command takes.
type commonFlags struct {
	configPath string
	opsAddr    string
}

func newFlagSet(name string, cf *commonFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("switchboard "+name, flag.ContinueOnError)
	fs.StringVar(&cf.configPath, "config", os.Getenv("SWITCHBOARD_CONFIG"), "config file (YAML)")
	fs.StringVar(&cf.opsAddr, "ops-addr", "", "address for /metrics, /healthz and /readyz (overrides ops.addr)")
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errUsage
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}

// subcommandOf splits "gateway telegram" style arguments.
func subcommandOf(args []string) (string, []string) {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return "", args
	}
	return args[0], args[1:]
}
