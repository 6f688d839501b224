package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
)

// gatewayPlatforms are the platforms `switchboard gateway <platform>` can
// run; each platform's wiring file registers itself with registerGateway.
// A gateway runs as the service "gateway-<platform>".
var gatewayPlatforms = map[string]string{}

// registerGateway registers platform's service (named "gateway-<platform>")
// and makes `switchboard gateway <platform>` run it. inDev: `switchboard
// dev` starts it too (its start decides whether it is configured).
func registerGateway(platform, summary string, start func(ctx context.Context, a *app) (func(context.Context) error, error), inDev bool) {
	gatewayPlatforms[platform] = summary
	registerService(service{name: "gateway-" + platform, start: start}, inDev)
}

func init() {
	register(command{name: "gateway", summary: "run one platform gateway: `gateway <platform>`", run: runGateway})
}

func runGateway(ctx context.Context, args []string) error {
	platform, rest := subcommandOf(args)
	if _, ok := gatewayPlatforms[platform]; !ok {
		names := make([]string, 0, len(gatewayPlatforms))
		for n := range gatewayPlatforms {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "usage: switchboard gateway <%s> [flags]\n", strings.Join(names, "|"))
		return errUsage
	}
	name := "gateway-" + platform
	return runServiceCommand(ctx, name, rest, name)
}
