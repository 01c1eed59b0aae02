package inspector

import (
	"bytes"
	"html"
	"html/template"
	"regexp"

	"github.com/microcosm-cc/bluemonday"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/renderer"
	gmhtml "github.com/yuin/goldmark/renderer/html"
	"github.com/yuin/goldmark/util"
)

// Markdown of user and assistant text blocks: goldmark (CommonMark and GFM tables, strikethrough,
// task lists and autolinks) with raw HTML off, then bluemonday. Raw HTML in the text is shown as
// text (escaped), not dropped, so that the page shows what the message says; images become links
// (the CSP loads no image from elsewhere); the sanitiser keeps only the elements goldmark writes,
// links with http, https or mailto URLs, and no style attribute (the CSP allows none).

var markdown = goldmark.New(
	goldmark.WithExtensions(extension.NewTable(extension.WithTableCellAlignMethod(extension.TableCellAlignAttribute)),
		extension.Strikethrough, extension.TaskList, extension.Linkify),
	goldmark.WithRendererOptions(
		gmhtml.WithHardWraps(), // a message's line breaks are meant
		renderer.WithNodeRenderers(util.Prioritized(rawAsText{}, 100)),
	),
)

var mdPolicy = func() *bluemonday.Policy {
	p := bluemonday.NewPolicy()
	p.AllowElements("p", "br", "hr", "strong", "em", "del", "code", "pre", "blockquote",
		"ul", "ol", "li", "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td")
	p.AllowAttrs("start").Matching(bluemonday.Integer).OnElements("ol")
	p.AllowAttrs("align").Matching(regexp.MustCompile(`^(left|right|center)$`)).OnElements("th", "td")
	p.AllowAttrs("class").Matching(regexp.MustCompile(`^language-[\w+#.-]{1,40}$`)).OnElements("code")
	p.AllowAttrs("type").Matching(regexp.MustCompile(`^checkbox$`)).OnElements("input")
	p.AllowAttrs("checked", "disabled").Matching(regexp.MustCompile(`^(|checked|disabled)$`)).OnElements("input")
	p.AllowAttrs("href").OnElements("a")
	p.AllowURLSchemes("http", "https", "mailto")
	p.AllowRelativeURLs(false)
	p.RequireParseableURLs(true)
	p.RequireNoFollowOnLinks(true)
	p.RequireNoReferrerOnLinks(true)
	p.AddTargetBlankToFullyQualifiedLinks(true)
	return p
}()

// renderMarkdown renders text as sanitised HTML.
func renderMarkdown(text string) template.HTML {
	var b bytes.Buffer
	if err := markdown.Convert([]byte(text), &b); err != nil {
		return template.HTML("<p>" + html.EscapeString(text) + "</p>") // #nosec: escaped
	}
	return template.HTML(mdPolicy.SanitizeReader(&b).String()) // #nosec: sanitised
}

// rawAsText renders raw HTML (inline and blocks) as escaped text, and images as links.
type rawAsText struct{}

func (rawAsText) RegisterFuncs(reg renderer.NodeRendererFuncRegisterer) {
	reg.Register(ast.KindRawHTML, func(w util.BufWriter, src []byte, n ast.Node, entering bool) (ast.WalkStatus, error) {
		if entering {
			segs := n.(*ast.RawHTML).Segments
			for i := range segs.Len() {
				s := segs.At(i)
				_, _ = w.WriteString(html.EscapeString(string(s.Value(src))))
			}
		}
		return ast.WalkSkipChildren, nil
	})
	reg.Register(ast.KindHTMLBlock, func(w util.BufWriter, src []byte, n ast.Node, entering bool) (ast.WalkStatus, error) {
		hb := n.(*ast.HTMLBlock)
		if entering {
			_, _ = w.WriteString(`<pre>`)
			lines := hb.Lines()
			for i := range lines.Len() {
				s := lines.At(i)
				_, _ = w.WriteString(html.EscapeString(string(s.Value(src))))
			}
			if hb.HasClosure() {
				_, _ = w.WriteString(html.EscapeString(string(hb.ClosureLine.Value(src))))
			}
			_, _ = w.WriteString("</pre>\n")
		}
		return ast.WalkSkipChildren, nil
	})
	reg.Register(ast.KindImage, func(w util.BufWriter, src []byte, n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		img := n.(*ast.Image)
		_, _ = w.WriteString(`<a href="` + html.EscapeString(string(util.URLEscape(img.Destination, true))) + `">[image: `)
		var alt bytes.Buffer
		_ = ast.Walk(img, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
			if t, ok := c.(*ast.Text); ok && entering {
				alt.Write(t.Segment.Value(src))
			}
			return ast.WalkContinue, nil
		})
		_, _ = w.WriteString(html.EscapeString(alt.String()) + "]</a>")
		return ast.WalkSkipChildren, nil
	})
}
