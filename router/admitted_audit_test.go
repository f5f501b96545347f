package router

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// TestRetryRecordsAMissingAdmission: a message stored without its message.admitted row — its
// admission committed as the store's connection failed, so the router answered an error and
// wrote none — gets the row when its producer sends it again; a further retry adds none.
func TestRetryRecordsAMissingAdmission(t *testing.T) {
	st := memory.New()
	t.Cleanup(st.Close)
	r := sweepFixture(t, st, time.Minute)
	env := &commonpb.Envelope{MessageId: uuid.NewString(), ProducerId: "p", CorrelationId: uuid.NewString(), SequenceNumber: 1,
		MessageType: commonpb.MessageType_DATA, ContentType: "application/json", Payload: []byte(`{}`), ContentLength: 2}
	_, err := st.Messages().Admit(t.Context(), store.AdmitRequest{Envelope: env, RecipientID: "c", Track: true, Lane: commonpb.CommunicationClass_STANDARD})
	require.NoError(t, err)
	admitted := func() int {
		es, err := st.Audit().List(t.Context(), store.AuditFilter{MessageID: env.GetMessageId(), TypePrefix: "message.admitted"})
		require.NoError(t, err)
		return len(es)
	}
	require.Zero(t, admitted(), "stored behind the router's back: no row yet")
	for range 2 {
		perr, err := r.Send(t.Context(), env, "c")
		require.NoError(t, err)
		require.Nil(t, perr, "a re-sent message in flight is accepted")
	}
	require.Equal(t, 1, admitted(), "the retry recorded the admission, once")
}
