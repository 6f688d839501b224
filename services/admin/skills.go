package admin

import (
	"context"

	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
	"github.com/switchboard-chat/switchboard/pkg/skill"
)

// ReloadSkills announces a skill reload in the SKILLS bucket, as
// /reload-skills does from a chat: every router replica and the Telegram
// and Discord gateways follow the announcement and scan skills.dirs
// again. This process holds no skills, so the answer is what it can
// vouch for, the stored announcement (its revision, who, when), not the
// processes' scans; each of those logs `skills loaded`.
func (s *Service) ReloadSkills(ctx context.Context, _ *adminv1.ReloadSkillsRequest) (*adminv1.ReloadSkillsResponse, error) {
	kv, err := s.bucket(ctx, s.skills, "skill reloads")
	if err != nil {
		return nil, err
	}
	a, rev, err := skill.Announce(ctx, kv, operatorBy(ctx))
	if err != nil {
		return nil, err
	}
	skillReloads.Inc()
	s.log.InfoContext(ctx, "skill reload announced from the admin API", "by", a.By, "revision", rev)
	if err := s.audit(ctx, "skills.reload", "global", map[string]any{"revision": rev, "id": a.ID}); err != nil {
		return nil, err
	}
	return &adminv1.ReloadSkillsResponse{Revision: rev, By: a.By, AnnouncedAt: timestamppb.New(a.At)}, nil
}
