package dlq

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/dlqadminpb"
)

func TestParseFilter(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f, perr := ParseFilter(&dlqadminpb.DeadLetterFilter{Since: timestamppb.New(t0), ErrorClass: "TTL-Expired", ErrorCode: "ack_timeout", Route: " b ", Limit: 5})
	require.Nil(t, perr)
	assert.Equal(t, Filter{Since: t0, Class: ClassTTLExpired, ErrorCode: commonpb.ErrorCode_ACK_TIMEOUT, RecipientID: "b", Limit: 5}, f)
	for _, bad := range []*dlqadminpb.DeadLetterFilter{
		{Since: timestamppb.New(t0), Until: timestamppb.New(t0.Add(-time.Second))},
		{ErrorClass: "nope"},
		{ErrorCode: "ERROR_CODE_UNSPECIFIED"},
		{Since: &timestamppb.Timestamp{Nanos: -1}},
	} {
		_, perr := ParseFilter(bad)
		require.NotNil(t, perr, "%v", bad)
		assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, perr.Code)
	}
}

func TestValidateRequeue(t *testing.T) {
	ids, perr := ValidateRequeue(&dlqadminpb.RequeueRequest{Ids: []int64{3, 1, 3}})
	require.Nil(t, perr)
	assert.Equal(t, []int64{3, 1}, ids)
	_, perr = ValidateRequeue(&dlqadminpb.RequeueRequest{})
	assert.Equal(t, "validation_error: name at least one dead letter id (sw4rm dlq list shows them)", perr.Error())
	many := make([]int64, MaxIDs+1)
	for i := range many {
		many[i] = int64(i)
	}
	_, perr = ValidateRequeue(&dlqadminpb.RequeueRequest{Ids: many})
	assert.Equal(t, "validation_error: at most 1000 ids per call, got 1001", perr.Error())
}

func TestValidateGet(t *testing.T) {
	id, perr := ValidateGet(&dlqadminpb.GetDeadLetterRequest{Id: 7})
	require.Nil(t, perr)
	assert.Equal(t, int64(7), id)
	for _, bad := range []int64{0, -1} {
		_, perr = ValidateGet(&dlqadminpb.GetDeadLetterRequest{Id: bad})
		require.NotNil(t, perr, "id %d", bad)
		assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, perr.Code)
	}
}

func TestValidateExport(t *testing.T) {
	_, _, perr := ValidateExport(&dlqadminpb.ExportRequest{Ids: []int64{1}, Filter: &dlqadminpb.DeadLetterFilter{Route: "a"}})
	assert.Equal(t, "validation_error: select dead letters either by id or by filter, not both", perr.Error())
	ids, _, perr := ValidateExport(&dlqadminpb.ExportRequest{Ids: []int64{2, 2}})
	require.Nil(t, perr)
	assert.Equal(t, []int64{2}, ids)
	ids, f, perr := ValidateExport(&dlqadminpb.ExportRequest{Filter: &dlqadminpb.DeadLetterFilter{Producer: "p"}})
	require.Nil(t, perr)
	assert.Nil(t, ids)
	assert.Equal(t, "p", f.ProducerID)
}
