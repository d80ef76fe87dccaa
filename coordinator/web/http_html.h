// The pieces every page of the coordinator's web site is made of: escaping,
// tables, and the page shell with its stylesheet. Every text that comes
// from a job, an agent or a log goes through HtmlEscape (Text cells do it).
#ifndef PARALLAX_COORDINATOR_HTTP_HTML_H_
#define PARALLAX_COORDINATOR_HTTP_HTML_H_

#include <cstdint>
#include <string>
#include <vector>

namespace parallax::coordinator {

// `text` with & < > " ' replaced by entities, for HTML text and attributes.
std::string HtmlEscape(const std::string& text);

// A table cell: HTML, escaped from text (Text, Num) or given as markup
// (Raw); Num cells are right-aligned.
struct Cell {
  std::string html;
  std::string css_class;
};
Cell Text(const std::string& text);
Cell Num(const std::string& text);
Cell Raw(std::string html);

// <table id="id"> with a header row and one <tr> per row in <tbody>.
std::string Table(const std::string& id, const std::vector<std::string>& headers,
                  const std::vector<std::vector<Cell>>& rows);

// A whole document: title, the site's stylesheet, a header with the links
// every page has, `body`, and a <meta> refresh every `refresh_s` seconds
// (0: none) so that a page stays current without any script.
std::string Page(const std::string& title, const std::string& body, int refresh_s);

// `v` with `digits` decimals ("3.14"), for labels and coordinates.
std::string Fixed(double v, int digits);

// "3 s ago", "5 min ago", "2 h ago", "4 d ago" for a time `then` before
// `now` (milliseconds); "-" for 0.
std::string Ago(int64_t then, int64_t now);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_HTTP_HTML_H_
