package natsd

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A client given the server through nats.InProcessServer talks to it over
// an in-process pipe, while the port still serves clients that dial it.
func TestInProcessClientsAndDialedClientsMeet(t *testing.T) {
	srv, err := Start(Config{Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)

	in, err := nats.Connect(srv.ClientURL(), nats.InProcessServer(srv))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if addr := in.ConnectedAddr(); addr != "pipe" {
		t.Fatalf("in-process client connected to %q, want the pipe", addr)
	}
	dialed, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer dialed.Close()

	sub, err := dialed.SubscribeSync("greet")
	if err != nil {
		t.Fatal(err)
	}
	if err := dialed.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := in.Publish("greet", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("dialed client did not get the in-process client's message: %v", err)
	}
	if string(msg.Data) != "hello" {
		t.Fatalf("got %q", msg.Data)
	}
}
