// Command switchboard runs any Switchboard service, or all of them in one
// process for a laptop (`switchboard dev`).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = hangups.listen(ctx)
	memoryLimit(nil)
	err := dispatch(ctx, os.Args[1:])
	stop()
	if errors.Is(err, errUsage) {
		os.Exit(2)
	}
	var code exitCode
	if errors.As(err, &code) {
		os.Exit(int(code))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "switchboard:", err)
		os.Exit(1)
	}
}
