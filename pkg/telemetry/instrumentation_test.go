package telemetry_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/switchboard-chat/switchboard/pkg/pseudonym"
	"github.com/switchboard-chat/switchboard/pkg/telemetry"
)

// TestInstrumentationSpansPseudonyms: the spans the HTTP and gRPC
// instrumentation libraries record (a server's and a client's, with
// the platform ids a request's path and query or an RPC's error text
// hold) are exported with no raw id the logs would hide: ids in URLs
// as their pseudonyms, the libraries' error texts, which no call site
// writes and SpanError never sees, withheld.
func TestInstrumentationSpansPseudonyms(t *testing.T) {
	const (
		chat  = "-100123456789"
		phone = "+15551234567"
		room  = "!room:example.org"
		snow  = "900000000000000001"
	)
	raw := []string{"100123456789", "15551234567", "room:example.org", "room%3Aexample.org", snow}
	p := pseudonym.New("k")
	exp := tracetest.NewInMemoryExporter()
	shutdown, err := telemetry.SetupTracing(context.Background(), telemetry.TraceConfig{Service: "switchboard-test", Exporter: exp, Pseudonyms: p})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()

	// An HTTP server whose span is named by the request's path (as the
	// API gateway's is), and a client whose request fails.
	srv := httptest.NewServer(otelhttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such chat", http.StatusInternalServerError)
	}), "gateway.api", otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
		return "gateway.api " + r.Method + " " + r.URL.Path
	})))
	defer srv.Close()
	client := &http.Client{Transport: otelhttp.NewTransport(http.DefaultTransport)}
	res, err := client.Get(srv.URL + "/v1/chats/" + chat + "/rooms/%21room:example.org/messages?chat_id=" + chat + "&to=%2B15551234567&limit=20")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := closed.Addr().String()
	closed.Close()
	if res, err := client.Get("http://" + gone + "/bot/sendMessage?chat_id=" + chat); err == nil {
		res.Body.Close()
		t.Fatal("a request to a closed port succeeded")
	}

	// A gRPC server whose handler fails naming a chat, and its client.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.StatsHandler(otelgrpc.NewServerHandler()),
		grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
			// Read as a unary handler does: a status sent before the
			// request is read can reach the client's stats as OK.
			if err := stream.RecvMsg(&emptypb.Empty{}); err != nil {
				return err
			}
			return status.Errorf(grpccodes.Internal, "send to channel %s: 403 Forbidden", snow)
		}))
	go gs.Serve(lis) //nolint:errcheck // ends with Stop
	defer gs.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Invoke(context.Background(), "/switchboard.test.v1.Chats/Send", &emptypb.Empty{}, &emptypb.Empty{}); status.Code(err) != grpccodes.Internal {
		t.Fatalf("invoke: %v, want Internal", err)
	}

	// Two HTTP clients, an HTTP server, a gRPC client and server: the
	// servers' spans may end just after their clients have the answer.
	spans := exp.GetSpans()
	for deadline := time.Now().Add(10 * time.Second); len(spans) < 5 && time.Now().Before(deadline); spans = exp.GetSpans() {
		time.Sleep(10 * time.Millisecond)
	}
	if len(spans) < 5 {
		t.Fatalf("%d spans, want 5", len(spans))
	}
	var grpcErrors, urlPaths int
	for _, s := range spans {
		texts := []string{s.Name, s.Status.Description}
		kvs := append([]attribute.KeyValue(nil), s.Attributes...)
		for _, ev := range s.Events {
			texts = append(texts, ev.Name)
			kvs = append(kvs, ev.Attributes...)
		}
		for _, kv := range kvs {
			texts = append(texts, kv.Value.String())
			if kv.Key == "url.path" && s.SpanKind.String() == "server" {
				urlPaths++
				if want := "/v1/chats/" + p.ID(chat) + "/rooms/" + p.ID(room) + "/messages"; kv.Value.AsString() != want {
					t.Errorf("url.path %q, want %q", kv.Value.AsString(), want)
				}
			}
		}
		for _, text := range texts {
			for _, id := range raw {
				if strings.Contains(text, id) {
					t.Errorf("span %q exported with %q in %q", s.Name, id, text)
				}
			}
		}
		// The client's span fails with the RPC's status, its text
		// withheld; so does the server's (checked for raw ids above).
		if strings.HasPrefix(s.Name, "switchboard.test.v1.Chats/Send") {
			grpcErrors++
			if s.SpanKind == trace.SpanKindClient && (s.Status.Code != codes.Error || s.Status.Description == "") {
				t.Errorf("client span %q status %v %q, want an error with its text withheld", s.Name, s.Status.Code, s.Status.Description)
			}
		}
	}
	if grpcErrors != 2 || urlPaths != 1 {
		t.Errorf("%d failed gRPC spans and %d server url.path attributes, want 2 and 1", grpcErrors, urlPaths)
	}
}
