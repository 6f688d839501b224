package outbox

import (
	"context"
	"errors"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
)

// Admin serves the delivery part of the admin API
// (adminv1.AdminServiceServer's ListDeliveries, RetryDeliveries and
// PurgeDeliveries) from the outbox. The admin service embeds it or
// forwards to it; authentication and the audit log are its business.
type Admin struct {
	Store *Store
	// TTL is the fresh lifetime a requeued row gets (delivery.ttl).
	TTL time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

func (a *Admin) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

func (a *Admin) ttl() time.Duration {
	if a.TTL > 0 {
		return a.TTL
	}
	return time.Hour
}

// ListDeliveries lists outbox rows; dead letters when no state is given.
func (a *Admin) ListDeliveries(ctx context.Context, req *adminv1.ListDeliveriesRequest) (*adminv1.ListDeliveriesResponse, error) {
	var states []State
	for _, s := range req.GetStates() {
		st := StateFromProto(s)
		if st == "" {
			return nil, status.Errorf(codes.InvalidArgument, "unknown delivery state %v", s)
		}
		states = append(states, st)
	}
	rows, err := a.Store.List(ctx, states, int(req.GetLimit()))
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	resp := &adminv1.ListDeliveriesResponse{}
	for _, r := range rows {
		resp.Deliveries = append(resp.Deliveries, r.Proto())
	}
	return resp, nil
}

// RetryDeliveries requeues dead letters.
func (a *Admin) RetryDeliveries(ctx context.Context, req *adminv1.RetryDeliveriesRequest) (*adminv1.RetryDeliveriesResponse, error) {
	ids, err := parseIDs(req.GetIds(), req.GetAll())
	if err != nil {
		return nil, err
	}
	n, err := a.Store.Requeue(ctx, ids, req.GetAll(), a.now(), a.ttl())
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &adminv1.RetryDeliveriesResponse{Requeued: int32(n)}, nil
}

// PurgeDeliveries deletes dead letters.
func (a *Admin) PurgeDeliveries(ctx context.Context, req *adminv1.PurgeDeliveriesRequest) (*adminv1.PurgeDeliveriesResponse, error) {
	ids, err := parseIDs(req.GetIds(), req.GetAll())
	if err != nil {
		return nil, err
	}
	n, err := a.Store.Purge(ctx, ids, req.GetAll())
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &adminv1.PurgeDeliveriesResponse{Purged: int32(n)}, nil
}

var errNoSelection = errors.New("give delivery ids or all=true")

func parseIDs(raw []string, all bool) ([]int64, error) {
	if len(raw) == 0 && !all {
		return nil, status.Error(codes.InvalidArgument, errNoSelection.Error())
	}
	ids := make([]int64, 0, len(raw))
	for _, s := range raw {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "delivery id %q is not a number", s)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
