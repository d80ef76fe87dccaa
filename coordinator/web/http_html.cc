#include "coordinator/web/http_html.h"

#include <algorithm>
#include <cstdio>

namespace parallax::coordinator {
namespace {

// Inline (the Content-Security-Policy allows inline styles, nothing else).
constexpr char kStyle[] = R"css(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2733;background:#f6f7f9}
header{background:#1d2733;color:#fff;padding:10px 24px;display:flex;gap:24px;align-items:baseline}
header a{color:#cfe3ff;text-decoration:none}header .brand{font-weight:600;color:#fff}
main{padding:16px 24px;max-width:1280px}
h1{font-size:20px;margin:8px 0 12px}h2{font-size:16px;margin:22px 0 8px}
table{border-collapse:collapse;background:#fff;font-size:13px;margin-bottom:8px}
th,td{border:1px solid #dde2e8;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef1f5;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
.state{font-weight:600;padding:1px 6px;border-radius:3px;font-size:12px}
.s-RUNNING,.s-PLACING{background:#dbeafe;color:#1e40af}.s-SUCCEEDED,.s-alive{background:#dcfce7;color:#166534}
.s-FAILED,.s-lost{background:#fee2e2;color:#991b1b}.s-CANCELLED,.s-draining{background:#fef3c7;color:#92400e}
.s-PENDING{background:#e5e7eb;color:#374151}
.facts{display:grid;grid-template-columns:max-content auto;gap:2px 16px;margin-bottom:8px}
.facts dt{color:#5b6573}.facts dd{margin:0}
.charts{display:flex;flex-wrap:wrap;gap:16px}
svg.chart{background:#fff;border:1px solid #dde2e8}
svg.chart .plot{fill:#fbfcfd;stroke:#c5ccd6}svg.chart .curve{stroke:#2563eb;stroke-width:1.6}
svg.chart text{font:12px system-ui,sans-serif;fill:#5b6573}svg.chart .chart-title{font-weight:600;fill:#1d2733}
pre.log{background:#0f1720;color:#d7e1ec;padding:8px;max-height:320px;overflow:auto;font-size:12px;margin:4px 0 10px;white-space:pre-wrap;overflow-wrap:anywhere}
details summary{cursor:pointer;margin:4px 0}progress{width:120px;vertical-align:middle}
.muted{color:#6b7280}.error{color:#991b1b}
)css";

}  // namespace

std::string HtmlEscape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

Cell Text(const std::string& text) { return Cell{HtmlEscape(text), ""}; }
Cell Num(const std::string& text) { return Cell{HtmlEscape(text), "num"}; }
Cell Raw(std::string html) { return Cell{std::move(html), ""}; }

std::string Table(const std::string& id, const std::vector<std::string>& headers,
                  const std::vector<std::vector<Cell>>& rows) {
  std::string html = "<table id=\"" + HtmlEscape(id) + "\"><thead><tr>";
  for (const std::string& h : headers) html += "<th>" + HtmlEscape(h) + "</th>";
  html += "</tr></thead><tbody>";
  for (const auto& row : rows) {
    html += "<tr>";
    for (const Cell& c : row) {
      html += c.css_class.empty() ? "<td>" : "<td class=\"" + c.css_class + "\">";
      html += c.html + "</td>";
    }
    html += "</tr>";
  }
  html += "</tbody></table>";
  return html;
}

std::string Page(const std::string& title, const std::string& body, int refresh_s) {
  std::string html =
      "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">";
  if (refresh_s > 0) {
    html += "<meta http-equiv=\"refresh\" content=\"" + std::to_string(refresh_s) + "\">";
  }
  html += "<title>" + HtmlEscape(title) + " - Parallax</title><style>" + kStyle +
          "</style></head><body><header><a class=\"brand\" href=\"/\">Parallax</a>"
          "<a href=\"/\">jobs and agents</a><a href=\"/metrics\">metrics</a></header><main>" +
          body + "</main></body></html>\n";
  return html;
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string Ago(int64_t then, int64_t now) {
  if (then <= 0) return "-";
  int64_t s = std::max<int64_t>(0, (now - then) / 1000);
  if (s < 120) return std::to_string(s) + " s ago";
  if (s < 2 * 3600) return std::to_string(s / 60) + " min ago";
  if (s < 2 * 86400) return std::to_string(s / 3600) + " h ago";
  return std::to_string(s / 86400) + " d ago";
}

}  // namespace parallax::coordinator
