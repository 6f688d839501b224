package panics

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// UnaryServerInterceptor recovers a panic in a unary gRPC handler (an
// admin verb such as PruneSessions, a DeliveryService call): the call
// fails with codes.Internal, its caller may try again, and the server
// lives on; grpc-go does not recover handlers, so the panic would end
// the process with every other call in flight. Logged with the method
// and counted under component.
func UnaryServerInterceptor(log *slog.Logger, component string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		var resp any
		err := Recover(log, component, func() error {
			var herr error
			resp, herr = handler(ctx, req)
			return herr
		}, "method", info.FullMethod)
		if errors.Is(err, ErrPanicked) {
			return nil, status.Error(codes.Internal, "internal error: the server panicked (logged)")
		}
		return resp, err
	}
}
