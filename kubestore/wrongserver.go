package kubestore

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/baton-go/baton/backend"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A kubeconfig (or *rest.Config) that points at a server of another kind
// (a web server, a proxy's error page, a login page) must not read as a
// missing lock object ("not found"), nor be retried for ever as if the API
// server were down: that is a setup that cannot work, and the engine stops
// at once on backend.ErrMisconfigured. A Kubernetes API server answers
// every request on the lock objects' paths with an object or a Status, in
// JSON or protobuf; the one exception, a plain-text "404 page not found",
// means that it does not serve the resource at all, which for Lease and
// ConfigMap (served by every supported version) is the same mistake.

// wrongServer returns an error matching ErrNotAPIServer and
// backend.ErrMisconfigured that says what answered, if err is an answer
// that no Kubernetes API server serving resource gives; otherwise err
// itself. notServed404 says whether a 404 that is not a Status counts (not
// for a custom resource, where it means that the CRD is not installed).
func wrongServer(err error, resource string, notServed404 bool) error {
	if err == nil || errors.Is(err, backend.ErrCorruptRecord) {
		return err // a record of baton's that does not decode is not the server's doing
	}
	if body, code, ok := unexpectedAnswer(err); ok {
		switch {
		case code == http.StatusMethodNotAllowed, code == http.StatusNotImplemented,
			code == http.StatusNotFound && notServed404:
			return wrongServerError(resource, fmt.Sprintf("HTTP %d and a body that is not a Kubernetes API status (%s)", code, excerpt(body)))
		}
		return err
	}
	if ct, ok := undecodable(err); ok {
		return wrongServerError(resource, fmt.Sprintf("a success with content of type %s, which no Kubernetes API server sends", ct))
	}
	if isJSONMismatch(err) {
		return wrongServerError(resource, fmt.Sprintf("JSON that is not a %s object (%v)", resource, err))
	}
	return err
}

// isJSONMismatch recognises the decoders' errors for JSON that is not an
// API object of the type asked for, which an API server that serves the
// type never sends. apimachinery's serializer and its JSON package have
// no exported error types for them: their messages are matched.
func isJSONMismatch(err error) bool {
	msg := err.Error()
	if strings.Contains(msg, "unexpected end of JSON input") {
		// A body cut short is more likely a failure on the way than
		// another server, and must stay retried.
		return false
	}
	for _, m := range []string{"json parse error", "json: cannot unmarshal", "invalid character "} {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// checkAnswer returns an error matching backend.ErrMisconfigured if an
// object the server returned for name has another name: an answer that
// decodes (any JSON object does) but is no API server's.
func checkAnswer(resource, name, got string) error {
	if got == name {
		return nil
	}
	return wrongServerError(resource, fmt.Sprintf("an object named %q for the object %q", got, name))
}

func wrongServerError(resource, answer string) error {
	return fmt.Errorf("%w (%w): the server answered a request for %s with %s: it is not a Kubernetes API server "+
		"(or a proxy in front of one answered, such as a login page, or the server does not serve %s); "+
		"check the server URL of the kubeconfig's current context (kubectl config view --minify)",
		ErrNotAPIServer, backend.ErrMisconfigured, resource, answer, resource)
}

// unexpectedAnswer returns the body and status code of an error answer
// that was not a Kubernetes Status (client-go marks it with the cause
// UnexpectedServerResponse).
func unexpectedAnswer(err error) (body string, code int, ok bool) {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return "", 0, false
	}
	s := st.Status()
	if s.Details == nil {
		return "", 0, false
	}
	for _, c := range s.Details.Causes {
		if c.Type == metav1.CauseTypeUnexpectedServerResponse {
			return c.Message, int(s.Code), true
		}
	}
	return "", 0, false
}

// undecodable recognises client-go's error for a successful answer whose
// content type it has no decoder for ("serializer for text/html doesn't
// exist"), and returns that content type.
func undecodable(err error) (contentType string, ok bool) {
	msg := err.Error()
	const pre, post = "serializer for ", " doesn't exist"
	i := strings.Index(msg, pre)
	if i < 0 || !strings.HasSuffix(msg, post) {
		return "", false
	}
	return msg[i+len(pre) : len(msg)-len(post)], true
}

// excerpt quotes the start of an answer's body.
func excerpt(body string) string {
	const most = 80
	body = strings.Join(strings.Fields(body), " ")
	if len(body) > most {
		body = body[:most] + "..."
	}
	return fmt.Sprintf("%q", body)
}
