package protocol_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

func validEnvelope() *commonpb.Envelope {
	return &commonpb.Envelope{
		MessageId: "5a1d9c8e-6b3f-4a87-8f5e-91a2c0ab1234", ProducerId: "agent-a", CorrelationId: "wf-1111",
		MessageType: commonpb.MessageType_DATA, ContentType: "application/json", Payload: []byte(`{"a":1}`), ContentLength: 7,
	}
}

func TestValidateEnvelope(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*commonpb.Envelope)
		code   commonpb.ErrorCode // 0 = valid
		msg    string
	}{
		{"valid", func(*commonpb.Envelope) {}, 0, ""},
		{"no payload needs no content type", func(e *commonpb.Envelope) { e.Payload, e.ContentLength, e.ContentType = nil, 0, "" }, 0, ""},
		{"content type with parameters", func(e *commonpb.Envelope) { e.ContentType = "text/plain; charset=utf-8" }, 0, ""},
		{"missing message_id", func(e *commonpb.Envelope) { e.MessageId = "" }, commonpb.ErrorCode_VALIDATION_ERROR, "message_id is required"},
		{"non-UUID message_id", func(e *commonpb.Envelope) { e.MessageId = "msg001" }, commonpb.ErrorCode_VALIDATION_ERROR, "not a UUID"},
		{"braced UUID", func(e *commonpb.Envelope) { e.MessageId = "{5a1d9c8e-6b3f-4a87-8f5e-91a2c0ab1234}" }, commonpb.ErrorCode_VALIDATION_ERROR, "not a UUID"},
		{"missing producer", func(e *commonpb.Envelope) { e.ProducerId = "" }, commonpb.ErrorCode_VALIDATION_ERROR, "producer_id is required"},
		{"long producer", func(e *commonpb.Envelope) { e.ProducerId = strings.Repeat("p", 300) }, commonpb.ErrorCode_VALIDATION_ERROR, "longer than"},
		{"missing correlation", func(e *commonpb.Envelope) { e.CorrelationId = "" }, commonpb.ErrorCode_VALIDATION_ERROR, "correlation_id is required"},
		{"unspecified type", func(e *commonpb.Envelope) { e.MessageType = 0 }, commonpb.ErrorCode_VALIDATION_ERROR, "message_type is required"},
		{"undefined type", func(e *commonpb.Envelope) { e.MessageType = 42 }, commonpb.ErrorCode_UNSUPPORTED_MESSAGE_TYPE, "not defined"},
		{"payload without content type", func(e *commonpb.Envelope) { e.ContentType = "" }, commonpb.ErrorCode_VALIDATION_ERROR, "content_type is required"},
		{"bad content type", func(e *commonpb.Envelope) { e.ContentType = "json" }, commonpb.ErrorCode_VALIDATION_ERROR, "not a MIME type"},
		{"length too small", func(e *commonpb.Envelope) { e.ContentLength = 3 }, commonpb.ErrorCode_VALIDATION_ERROR, "does not match"},
		{"length without payload", func(e *commonpb.Envelope) { e.Payload = nil }, commonpb.ErrorCode_VALIDATION_ERROR, "does not match"},
		{"oversize", func(e *commonpb.Envelope) { e.Payload = make([]byte, 2<<20); e.ContentLength = 2 << 20 }, commonpb.ErrorCode_OVERSIZE_PAYLOAD, "exceeds"},
		{"ack with bad payload", func(e *commonpb.Envelope) { e.MessageType = commonpb.MessageType_ACKNOWLEDGEMENT }, commonpb.ErrorCode_VALIDATION_ERROR, "ack_for_message_id"},
		{"hlc of §4's example", func(e *commonpb.Envelope) { e.HlcTimestamp = "1725552000.000001.node-a" }, 0, ""},
		{"padded hlc", func(e *commonpb.Envelope) { e.HlcTimestamp = "0001725552000000.000001.node-a" }, 0, ""},
		{"garbage hlc", func(e *commonpb.Envelope) { e.HlcTimestamp = "yesterday" }, commonpb.ErrorCode_VALIDATION_ERROR, "hlc_timestamp"},
		{"hlc without node", func(e *commonpb.Envelope) { e.HlcTimestamp = "1725552000.1." }, commonpb.ErrorCode_VALIDATION_ERROR, "hlc_timestamp"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := validEnvelope()
			c.mutate(env)
			err := protocol.ValidateEnvelope(env, protocol.Limits{})
			if c.code == 0 {
				require.Nil(t, err)
				return
			}
			require.NotNil(t, err)
			assert.Equal(t, c.code, err.Code)
			assert.Contains(t, err.Error(), c.msg)
			assert.True(t, strings.HasPrefix(err.Error(), protocol.CodeName(c.code)+": "), err.Error())
		})
	}
	require.NotNil(t, protocol.ValidateEnvelope(nil, protocol.Limits{}))
	small := validEnvelope()
	assert.Equal(t, commonpb.ErrorCode_OVERSIZE_PAYLOAD, protocol.ValidateEnvelope(small, protocol.Limits{MaxPayloadBytes: 3}).Code)
}

func TestAckRoundTripAndParsing(t *testing.T) {
	env := protocol.NewAckEnvelope(protocol.AckEnvelopeInput{
		MessageID: "5a1d9c8e-6b3f-4a87-8f5e-91a2c0ab1234", ProducerID: protocol.SchedulerID, CorrelationID: "wf-3333",
		Ack: protocol.AckPayload{AckForMessageID: "mX", Stage: commonpb.AckStage_REJECTED, ErrorCode: commonpb.ErrorCode_BUFFER_FULL, Note: "full"},
	})
	assert.JSONEq(t, `{"ack_for_message_id":"mX","ack_stage":"REJECTED","error_code":"BUFFER_FULL","note":"full"}`, string(env.GetPayload()))
	assert.Equal(t, uint64(len(env.GetPayload())), env.GetContentLength())
	require.Nil(t, protocol.ValidateEnvelope(env, protocol.Limits{}))
	got, perr := protocol.ParseAck(env)
	require.Nil(t, perr)
	assert.Equal(t, protocol.AckPayload{AckForMessageID: "mX", Stage: commonpb.AckStage_REJECTED, ErrorCode: commonpb.ErrorCode_BUFFER_FULL, Note: "full"}, got)

	parse := func(payload, contentType string) (protocol.AckPayload, *protocol.Error) {
		return protocol.ParseAck(&commonpb.Envelope{ContentType: contentType, Payload: []byte(payload)})
	}
	// The RFC's own example (C.3) spells the code in lower case.
	p, perr := parse(`{"ack_for_message_id":"mX","ack_stage":"rejected","error_code":"buffer_full"}`, "application/json")
	require.Nil(t, perr)
	assert.Equal(t, commonpb.ErrorCode_BUFFER_FULL, p.ErrorCode)
	// The published JS and Python SDKs write the enums as numbers.
	p, perr = parse(`{"ack_for_message_id":"mX","ack_stage":3,"error_code":0}`, "application/json")
	require.Nil(t, perr)
	assert.Equal(t, protocol.AckPayload{AckForMessageID: "mX", Stage: commonpb.AckStage_FULFILLED}, p)
	p, perr = parse(`{"ack_for_message_id":"mX","ack_stage":4,"error_code":6,"note":"bad"}`, "application/json")
	require.Nil(t, perr)
	assert.Equal(t, protocol.AckPayload{AckForMessageID: "mX", Stage: commonpb.AckStage_REJECTED, ErrorCode: commonpb.ErrorCode_VALIDATION_ERROR, Note: "bad"}, p)
	p, perr = parse(`{"ack_for_message_id":"mX","ack_stage":"READ","error_code":null}`, "application/json")
	require.Nil(t, perr)
	assert.Equal(t, commonpb.AckStage_READ, p.Stage)
	for name, c := range map[string][2]string{
		"numeric stage 0":        {`{"ack_for_message_id":"m","ack_stage":0}`, "application/json"},
		"undefined stage number": {`{"ack_for_message_id":"m","ack_stage":7}`, "application/json"},
		"negative stage":         {`{"ack_for_message_id":"m","ack_stage":-1}`, "application/json"},
		"fractional stage":       {`{"ack_for_message_id":"m","ack_stage":3.5}`, "application/json"},
		"stage beyond int32":     {`{"ack_for_message_id":"m","ack_stage":4294967299}`, "application/json"},
		"boolean stage":          {`{"ack_for_message_id":"m","ack_stage":true}`, "application/json"},
		"undefined code number":  {`{"ack_for_message_id":"m","ack_stage":5,"error_code":17}`, "application/json"},
		"object code":            {`{"ack_for_message_id":"m","ack_stage":5,"error_code":{}}`, "application/json"},
		"null stage":             {`{"ack_for_message_id":"m","ack_stage":null}`, "application/json"},
		"wrong content type":     {`{"ack_for_message_id":"m","ack_stage":"READ"}`, "text/plain"},
		"not json":               {`nope`, "application/json"},
		"missing target":         {`{"ack_stage":"READ"}`, "application/json"},
		"unknown stage":          {`{"ack_for_message_id":"m","ack_stage":"DONE"}`, "application/json"},
		"unspecified stage":      {`{"ack_for_message_id":"m","ack_stage":"ACK_STAGE_UNSPECIFIED"}`, "application/json"},
		"unknown code":           {`{"ack_for_message_id":"m","ack_stage":"FAILED","error_code":"OOPS"}`, "application/json"},
		"look-alike stage":       {`{"ack_for_message_id":"m","ack_stage":"tımed_out"}`, "application/json"},
		"look-alike code":        {`{"ack_for_message_id":"m","ack_stage":"FAILED","error_code":"agent_ſhutdown"}`, "application/json"},
	} {
		_, perr := parse(c[0], c[1])
		require.NotNil(t, perr, name)
		assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, perr.Code, name)
	}
	for s := commonpb.AckStage_RECEIVED; s <= commonpb.AckStage_TIMED_OUT; s++ {
		assert.Equal(t, s, protocol.StageForState(protocol.StateForStage(s)), s.String())
	}
}

func TestMessageLifecycle(t *testing.T) {
	const (
		sent      = commonpb.EnvelopeState_ENVELOPE_STATE_SENT
		received  = commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED
		read      = commonpb.EnvelopeState_ENVELOPE_STATE_READ
		fulfilled = commonpb.EnvelopeState_ENVELOPE_STATE_FULFILLED
		rejected  = commonpb.EnvelopeState_ENVELOPE_STATE_REJECTED
		failed    = commonpb.EnvelopeState_ENVELOPE_STATE_FAILED
		timedOut  = commonpb.EnvelopeState_ENVELOPE_STATE_TIMED_OUT
	)
	legal := [][2]commonpb.EnvelopeState{{sent, received}, {received, read}, {read, fulfilled}, {sent, fulfilled}, {received, rejected}, {received, failed}, {read, failed}, {sent, timedOut}}
	for _, tr := range legal {
		assert.True(t, protocol.MessageTransitionLegal(tr[0], tr[1]), "%s→%s", tr[0], tr[1])
	}
	illegal := [][2]commonpb.EnvelopeState{{fulfilled, received}, {read, received}, {timedOut, received}, {rejected, fulfilled}, {failed, read}, {received, received}, {read, rejected}}
	for _, tr := range illegal {
		assert.False(t, protocol.MessageTransitionLegal(tr[0], tr[1]), "%s→%s", tr[0], tr[1])
	}
	for _, s := range []commonpb.EnvelopeState{fulfilled, rejected, failed, timedOut} {
		assert.True(t, protocol.MessageStateTerminal(s))
	}
	for _, s := range []commonpb.EnvelopeState{sent, received, read} {
		assert.False(t, protocol.MessageStateTerminal(s))
	}
}

func TestAgentLifecycleTable(t *testing.T) {
	// Every edge of the Appendix C diagram is legal.
	edges := []string{
		"INITIALIZING RUNNABLE", "INITIALIZING FAILED_STATE", "RUNNABLE SCHEDULED", "SCHEDULED RUNNING",
		"RUNNING WAITING", "WAITING RUNNING", "RUNNING WAITING_RESOURCES", "WAITING_RESOURCES RUNNING",
		"WAITING_RESOURCES FAILED_STATE", "RUNNING SUSPENDED", "SUSPENDED RESUMED", "SUSPENDED FAILED_STATE",
		"RESUMED RUNNING", "RUNNING COMPLETED", "RUNNING FAILED_STATE", "RUNNING SHUTTING_DOWN",
		"SHUTTING_DOWN FAILED_STATE", "FAILED_STATE RECOVERING", "RECOVERING RUNNABLE", "RECOVERING FAILED_STATE",
		"RECOVERING SHUTTING_DOWN",
	}
	for _, e := range edges {
		from, to, _ := strings.Cut(e, " ")
		assert.True(t, protocol.AgentTransitionLegal(commonpb.AgentState(commonpb.AgentState_value[from]), commonpb.AgentState(commonpb.AgentState_value[to])), e)
	}
	for _, e := range []string{"FAILED_STATE RUNNABLE", "RUNNABLE RUNNING", "SUSPENDED RUNNING", "COMPLETED RUNNING", "SHUTTING_DOWN RUNNABLE", "INITIALIZING RUNNING"} {
		from, to, _ := strings.Cut(e, " ")
		assert.False(t, protocol.AgentTransitionLegal(commonpb.AgentState(commonpb.AgentState_value[from]), commonpb.AgentState(commonpb.AgentState_value[to])), e)
	}
}

func TestDescriptorValidation(t *testing.T) {
	ok := func() *registrypb.AgentDescriptor {
		return &registrypb.AgentDescriptor{AgentId: "coder-1", Name: "Coder", Description: "writes code", ModalitiesSupported: []string{"application/json", "image/*"}}
	}
	require.Nil(t, protocol.ValidateDescriptor(ok()))
	for name, c := range map[string]struct {
		mutate func(*registrypb.AgentDescriptor)
		msg    string
	}{
		"no id":           {func(d *registrypb.AgentDescriptor) { d.AgentId = "" }, "agent_id is required"},
		"bad id":          {func(d *registrypb.AgentDescriptor) { d.AgentId = "a b" }, "must be 1-128"},
		"slash id":        {func(d *registrypb.AgentDescriptor) { d.AgentId = "a/b" }, "must be 1-128"},
		"reserved":        {func(d *registrypb.AgentDescriptor) { d.AgentId = protocol.SchedulerID }, "reserved"},
		"no name":         {func(d *registrypb.AgentDescriptor) { d.Name = " " }, "name is required"},
		"long desc":       {func(d *registrypb.AgentDescriptor) { d.Description = strings.Repeat("word ", 201) }, "201 words"},
		"bad class":       {func(d *registrypb.AgentDescriptor) { d.CommunicationClass = 9 }, "communication_class"},
		"bad modality":    {func(d *registrypb.AgentDescriptor) { d.ModalitiesSupported = []string{"json"} }, "not a MIME type"},
		"empty modality":  {func(d *registrypb.AgentDescriptor) { d.ModalitiesSupported = []string{""} }, "not a MIME type"},
		"half a modality": {func(d *registrypb.AgentDescriptor) { d.ModalitiesSupported = []string{"image/"} }, "not a MIME type"},
	} {
		d := ok()
		c.mutate(d)
		err := protocol.ValidateDescriptor(d)
		require.NotNil(t, err, name)
		assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, err.Code, name)
		assert.Contains(t, err.Msg, c.msg, name)
	}
	require.Nil(t, protocol.ValidateDescriptor(&registrypb.AgentDescriptor{AgentId: "x", Name: "x", Description: strings.Repeat("w ", 200)}))

	d := &registrypb.AgentDescriptor{AgentId: "x", Name: "x"}
	protocol.NormalizeDescriptor(d)
	assert.Equal(t, commonpb.CommunicationClass_STANDARD, d.GetCommunicationClass())
	assert.Equal(t, protocol.DefaultModalities, d.GetModalitiesSupported())
	assert.Equal(t, registrypb.RegistrationType_STANDARD_AGENT, d.GetRegistrationType())
}

func TestModalities(t *testing.T) {
	assert.True(t, protocol.AcceptsContentType([]string{"application/json"}, "application/json; charset=utf-8"))
	assert.True(t, protocol.AcceptsContentType([]string{"image/*"}, "image/png"))
	assert.False(t, protocol.AcceptsContentType([]string{"image/*"}, "application/json"))
	assert.False(t, protocol.AcceptsContentType([]string{"application/json"}, "text/plain"))
	assert.True(t, protocol.AcceptsContentType(nil, "text/plain"), "the defaults apply when none are declared")
	assert.False(t, protocol.AcceptsContentType(nil, "audio/wav"))
	assert.False(t, protocol.AcceptsContentType([]string{"*/*"}, "not a type"))
}

func TestResolve(t *testing.T) {
	env := validEnvelope()
	r, perr := protocol.Resolve(env, "agent-b")
	require.Nil(t, perr)
	assert.Equal(t, protocol.Route{Recipient: "agent-b"}, r)

	_, perr = protocol.Resolve(env, "")
	require.NotNil(t, perr)
	assert.Equal(t, commonpb.ErrorCode_NO_ROUTE, perr.Code)
	assert.Contains(t, perr.Msg, wire.RecipientKey)

	_, perr = protocol.Resolve(env, env.GetProducerId())
	require.NotNil(t, perr)
	assert.Equal(t, commonpb.ErrorCode_NO_ROUTE, perr.Code)

	ack := protocol.NewAckEnvelope(protocol.AckEnvelopeInput{MessageID: "m2", ProducerID: "agent-b", CorrelationID: "c",
		Ack: protocol.AckPayload{AckForMessageID: "m1", Stage: commonpb.AckStage_READ}})
	r, perr = protocol.Resolve(ack, "ignored")
	require.Nil(t, perr)
	assert.Equal(t, protocol.Route{AckFor: "m1"}, r, "ACKs route by ack_for_message_id")
}

// TestDedupKey: a token is the key; without one, the sequence number with the message's
// content, so that a retry (same content) matches and a new message under a reused number
// does not; without either, no key.
func TestDedupKey(t *testing.T) {
	env := validEnvelope()
	env.SequenceNumber = 1
	key := protocol.DedupKey(env, "agent-b")
	assert.True(t, strings.HasPrefix(key, "s:1:"), key)
	assert.True(t, protocol.SequenceKey(key))

	retry := validEnvelope()
	retry.SequenceNumber, retry.MessageId, retry.RetryCount = 1, "6b2e0f4c-1d3a-4c5b-9e8f-0a1b2c3d4e5f", 1
	assert.Equal(t, key, protocol.DedupKey(retry, "agent-b"), "a retry repeats the content: same key")

	for name, mutate := range map[string]func(*commonpb.Envelope) string{
		"another payload":      func(e *commonpb.Envelope) string { e.Payload = []byte(`{"a":2}`); return "agent-b" },
		"another recipient":    func(*commonpb.Envelope) string { return "agent-c" },
		"another content type": func(e *commonpb.Envelope) string { e.ContentType = "text/plain"; return "agent-b" },
		"another type":         func(e *commonpb.Envelope) string { e.MessageType = commonpb.MessageType_CONTROL; return "agent-b" },
		"another number":       func(e *commonpb.Envelope) string { e.SequenceNumber = 2; return "agent-b" },
		"fields shifted": func(e *commonpb.Envelope) string {
			e.ContentType = "application/json" + `{"a":1}`
			e.Payload = nil
			return "agent-b"
		},
	} {
		e := validEnvelope()
		e.SequenceNumber = 1
		recipient := mutate(e)
		assert.NotEqual(t, key, protocol.DedupKey(e, recipient), name)
	}

	env.IdempotencyToken = "agent-a:create:abc"
	assert.Equal(t, "t:agent-a:create:abc", protocol.DedupKey(env, "agent-b"), "a token wins")
	assert.False(t, protocol.SequenceKey(protocol.DedupKey(env, "agent-b")))
	assert.Empty(t, protocol.DedupKey(validEnvelope(), "agent-b"), "sequence_number 0 cannot be told from unset")
}
