package inspector

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// tokenCookie holds the token after a ?token= login.
const tokenCookie = "agentlog_ui_token"

// guard checks every request before the routes: security headers; with a token, the bearer
// header or cookie (a GET with ?token= sets the cookie and redirects to the URL without it);
// without one, a loopback Host header only (a page elsewhere cannot reach the inspector through
// DNS rebinding).
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		if s.o.Token == "" {
			host, _, err := net.SplitHostPort(r.Host)
			if err != nil {
				host = r.Host
			}
			if !isLoopback(host) {
				s.errorPage(w, r, http.StatusForbidden, "Forbidden",
					"This inspector listens on loopback without a token and serves only requests for localhost; Host "+r.Host+" is refused.")
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		if t := r.URL.Query().Get("token"); t != "" && r.Method == http.MethodGet {
			if !s.tokenOK(t) {
				s.errorPage(w, r, http.StatusUnauthorized, "Unauthorized", "The token in the URL is wrong.")
				return
			}
			http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: t, Path: "/", HttpOnly: true,
				SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
			q := r.URL.Query()
			q.Del("token")
			u := url.URL{Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: q.Encode()}
			http.Redirect(w, r, u.String(), http.StatusSeeOther)
			return
		}
		if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && s.tokenOK(bearer) {
			next.ServeHTTP(w, r)
			return
		}
		if c, err := r.Cookie(tokenCookie); err == nil && s.tokenOK(c.Value) {
			next.ServeHTTP(w, r)
			return
		}
		h.Set("WWW-Authenticate", `Bearer realm="agentlog ui"`)
		s.errorPage(w, r, http.StatusUnauthorized, "Unauthorized",
			"This inspector needs its token: open the URL agentlog ui printed (…/?token=TOKEN) or send Authorization: Bearer TOKEN.")
	})
}

// tokenOK compares t with the token in constant time (of hashes, so the length leaks nothing).
func (s *Server) tokenOK(t string) bool {
	a, b := sha256.Sum256([]byte(t)), sha256.Sum256([]byte(s.o.Token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// csrfOK checks a state-changing request: the browser's cross-origin signals (Sec-Fetch-Site,
// Origin; net/http's CrossOriginProtection) and the form's CSRF token.
func (s *Server) csrfOK(r *http.Request) bool {
	if err := http.NewCrossOriginProtection().Check(r); err != nil {
		return false
	}
	t := r.PostFormValue("csrf")
	return subtle.ConstantTimeCompare([]byte(t), []byte(s.csrf)) == 1
}
