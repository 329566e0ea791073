"""Code snippets of the sample corpus: a few programming languages, with comments.

A snippet is two blocks below (placeholders written %%name%%, filled per snippet) and a
settings block that the generator builds from SETTINGS in the language's own syntax. Settings
blocks carry the emails, IP addresses and phone numbers that the PII step must leave alone,
because code is exempt from PII replacement (RECIPE.md §5).
"""

# Placeholders, filled per snippet: entity (plural noun), Entity, singular, Singular, field, n,
# timeout, port, threshold, major, hour, host, currency, locale, dir, and the local names item,
# out, tally, key, val, src, verb, Verb, so that two snippets of the same block differ on most
# lines, not only in a name or two.
BLOCKS = {
    "python": [
        """def %%verb%%_%%entity%%(%%src%%):
    \"\"\"%%Verb%% %%entity%% from a CSV export and skip %%item%%s without an id.\"\"\"
    %%out%% = []
    with open(%%src%%, newline="", encoding="utf-8") as handle:
        for %%item%% in csv.DictReader(handle):
            if not %%item%%.get("id"):
                continue  # incomplete export %%item%%s have no id
            %%out%%.append(%%item%%)
    return %%out%%""",
        """def summarize_%%entity%%(%%entity%%, %%key%%="%%field%%", top=%%n%%):
    # Count %%entity%% per %%field%% so that the report shows the largest groups first.
    %%tally%% = collections.Counter(%%item%%[%%key%%] for %%item%% in %%entity%%)
    return sorted(%%tally%%.items(), key=lambda pair: pair[1], reverse=True)[:top]""",
        """class %%Singular%%Cache:
    \"\"\"Keep the last %%n%% %%entity%% in memory to avoid repeated database queries.\"\"\"

    def __init__(self, size=%%n%%):
        self.size = size
        self.%%out%% = collections.OrderedDict()

    def get(self, %%key%%):
        if %%key%% in self.%%out%%:
            self.%%out%%.move_to_end(%%key%%)
        return self.%%out%%.get(%%key%%)

    def put(self, %%key%%, %%val%%):
        self.%%out%%[%%key%%] = %%val%%
        if len(self.%%out%%) > self.size:
            self.%%out%%.popitem(last=False)""",
        """def fetch_%%entity%%(session, since):
    # The API pages its %%entity%%; stop at the first empty page.
    page, %%out%% = 1, []
    while True:
        url = "https://%%host%%/api/v%%major%%/%%entity%%"
        response = session.get(url, params={"since": since, "page": page}, timeout=%%timeout%%)
        response.raise_for_status()
        batch = response.json()["%%entity%%"]
        if not batch:
            return %%out%%
        %%out%%.extend(batch)
        page += 1""",
        """def validate_%%singular%%(%%item%%):
    \"\"\"Return the problems of one %%singular%% %%item%%; an empty list means it is valid.\"\"\"
    problems = []
    if not %%item%%.get("%%field%%"):
        problems.append("missing %%field%%")
    if len(str(%%item%%.get("id", ""))) > %%n%%:
        problems.append("id longer than %%n%% characters")
    return problems""",
    ],
    "javascript": [
        """// Format a %%singular%% price for display; prices are kept in cents to avoid rounding.
function format%%Singular%%Price(cents, currency = "%%currency%%") {
  const %%val%% = cents / 100;
  return new Intl.NumberFormat("%%locale%%", { style: "currency", currency }).format(%%val%%);
}""",
        """async function %%verb%%%%Entity%%(apiBase) {
  // Retry once: the first request after a deploy sometimes times out.
  for (let attempt = 0; attempt < 2; attempt++) {
    const %%out%% = await fetch(`${apiBase}/%%entity%%?limit=%%n%%`);
    if (%%out%%.ok) {
      return %%out%%.json();
    }
  }
  throw new Error("could not %%verb%% %%entity%%");
}""",
        """const %%singular%%Table = document.querySelector("#%%entity%%-table");
%%singular%%Table.addEventListener("click", (event) => {
  const %%item%% = event.target.closest("tr");
  if (!%%item%%) return;
  %%item%%.classList.toggle("selected");
  console.log("selected %%singular%%", %%item%%.dataset.id);
});""",
        """// Group %%entity%% by %%field%% for the summary table.
function group%%Entity%%(%%entity%%) {
  const %%tally%% = new Map();
  for (const %%item%% of %%entity%%) {
    const %%key%% = %%item%%.%%field%% ?? "unknown";
    %%tally%%.set(%%key%%, (%%tally%%.get(%%key%%) ?? 0) + 1);
  }
  return [...%%tally%%.entries()].sort((a, b) => b[1] - a[1]).slice(0, %%n%%);
}""",
    ],
    "bash": [
        """# Back up the %%entity%% database every night and keep the newest %%n%% dumps.
set -euo pipefail
backup_dir="%%dir%%/%%entity%%"
mkdir -p "$backup_dir"
pg_dump --format=custom %%entity%% > "$backup_dir/%%entity%%-$(date +%F).dump"
ls -1t "$backup_dir" | tail -n +%%n%% | xargs -r -I{} rm -- "$backup_dir/{}\"""",
        """# Wait until the %%entity%% service answers before the deploy continues.
for attempt in $(seq 1 %%n%%); do
  if curl --silent --fail "http://localhost:%%port%%/health" > /dev/null; then
    echo "%%entity%% service is up after $attempt attempts"
    exit 0
  fi
  sleep %%timeout%%
done
echo "%%entity%% service did not start" >&2
exit 1""",
        """# Warn when the disk that holds the %%entity%% is almost full.
%%val%%=$(df --output=pcent /srv/%%entity%% | tail -n 1 | tr -dc '0-9')
if [ "$%%val%%" -gt %%threshold%% ]; then
  echo "disk usage at ${%%val%%}% on $(hostname)" | logger -t %%entity%%-disk
fi""",
        """# Compress %%entity%% logs older than %%n%% days and delete those older than a year.
find /var/log/%%entity%% -name '*.log' -mtime +%%n%% -exec gzip -9 {} \\;
find /var/log/%%entity%% -name '*.log.gz' -mtime +365 -delete
echo "rotated %%entity%% logs on $(date -I)\"""",
    ],
    "sql": [
        """-- Monthly totals of %%entity%%, newest month first.
SELECT date_trunc('month', created_at) AS month,
       count(*) AS %%entity%%_count
FROM %%entity%%
WHERE created_at >= now() - interval '%%n%% months'
GROUP BY month
ORDER BY month DESC;""",
        """-- One row per %%singular%%; ids come from a sequence.
CREATE TABLE %%entity%% (
    id          bigserial PRIMARY KEY,
    %%field%%   text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX %%entity%%_%%field%%_idx ON %%entity%% (%%field%%);""",
        """-- %%Entity%% without a %%field%%, oldest first, for the weekly clean-up.
SELECT id, created_at
FROM %%entity%%
WHERE %%field%% IS NULL OR %%field%% = ''
ORDER BY created_at
LIMIT %%n%%;""",
        """-- Move %%entity%% older than %%n%% months to the archive table.
BEGIN;
INSERT INTO %%entity%%_archive
SELECT * FROM %%entity%% WHERE created_at < now() - interval '%%n%% months';
DELETE FROM %%entity%% WHERE created_at < now() - interval '%%n%% months';
COMMIT;""",
    ],
    "yaml": [
        """# CI pipeline: lint, test, then build the %%entity%% image.
stages:
  - lint
  - test
  - build
test-%%entity%%:
  stage: test
  script:
    - pip install -r requirements.txt
    - pytest -q tests/%%entity%%
  timeout: %%timeout%%m""",
        """# Keep up to %%n%% replicas of the %%entity%% API during the day.
autoscaling:
  target: %%entity%%-api
  min_replicas: 2
  max_replicas: %%n%%
  cpu_percent: %%threshold%%""",
        """# Alert when the %%entity%% queue keeps growing for more than %%timeout%% minutes.
alerts:
  - name: %%entity%%-queue-backlog
    expr: queue_length{queue="%%entity%%"} > %%threshold%%0
    for: %%timeout%%m
    labels:
      severity: warning""",
        """# Nightly export of %%entity%% grouped by %%field%%.
export:
  source: %%entity%%
  group_by: %%field%%
  schedule: "0 %%hour%% * * *"
  keep_days: %%n%%""",
    ],
    "c": [
        """/* Moving average of the last readings of the %%entity%% sensors, to smooth out noise. */
double %%singular%%_moving_average(const double *%%entity%%, size_t count, size_t window)
{
    double %%out%% = 0.0;
    size_t start = count > window ? count - window : 0;
    for (size_t i = start; i < count; i++) {
        %%out%% += %%entity%%[i];
    }
    return count > start ? %%out%% / (double)(count - start) : 0.0;
}""",
        """/* Parse one "key=value" line of the %%entity%% configuration; returns 0 on success. */
int %%singular%%_parse_line(const char *line, char *%%key%%, size_t %%key%%_len,
    char *%%val%%, size_t %%val%%_len)
{
    const char *eq = strchr(line, '=');
    if (eq == NULL || (size_t)(eq - line) >= %%key%%_len) {
        return -1;
    }
    memcpy(%%key%%, line, (size_t)(eq - line));
    %%key%%[eq - line] = '\\0';
    snprintf(%%val%%, %%val%%_len, "%s", eq + 1);
    return 0;
}""",
        """/* Count the %%entity%% whose %%field%% is above the limit of %%threshold%%. */
size_t count_%%entity%%_over_limit(const int *%%field%%, size_t n)
{
    size_t %%tally%% = 0;
    for (size_t i = 0; i < n; i++) {
        if (%%field%%[i] > %%threshold%%) {
            %%tally%%++;
        }
    }
    return %%tally%%;
}""",
        """/* Clamp every %%singular%% reading into the range that the display can show. */
void clamp_%%entity%%(int *%%entity%%, size_t n, int lowest, int highest)
{
    for (size_t i = 0; i < n; i++) {
        if (%%entity%%[i] < lowest) {
            %%entity%%[i] = lowest;
        } else if (%%entity%%[i] > highest) {
            %%entity%%[i] = highest;
        }
    }
}""",
    ],
    "go": [
        """// %%Entity%%Handler returns the %%entity%% as JSON; the limit keeps responses small.
func %%Entity%%Handler(store Store) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		%%out%%, err := store.List%%Entity%%(r.Context(), %%n%%)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(%%out%%)
	}
}""",
        """// Retry%%Entity%% retries a call to the %%entity%% backend with growing pauses.
func Retry%%Entity%%(ctx context.Context, call func(context.Context) error) error {
	pause := %%timeout%%00 * time.Millisecond
	var err error
	for attempt := 0; attempt < %%n%%; attempt++ {
		if err = call(ctx); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
			pause *= 2
		}
	}
	return fmt.Errorf("%%entity%%: giving up after %%n%% attempts: %w", err)
}""",
        """// Top%%Entity%% returns the %%n%% %%entity%% with the highest %%field%% counts.
func Top%%Entity%%(%%tally%% map[string]int) []string {
	keys := make([]string, 0, len(%%tally%%))
	for %%key%% := range %%tally%% {
		keys = append(keys, %%key%%)
	}
	sort.Slice(keys, func(i, j int) bool { return %%tally%%[keys[i]] > %%tally%%[keys[j]] })
	if len(keys) > %%n%% {
		keys = keys[:%%n%%]
	}
	return keys
}""",
        """// Load%%Entity%%Config reads the %%entity%% settings file, or returns the defaults.
func Load%%Entity%%Config(%%src%% string) (Config, error) {
	cfg := DefaultConfig()
	data, err := os.ReadFile(%%src%%)
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, nil
	}
	if err != nil {
		return cfg, fmt.Errorf("reading %s: %w", %%src%%, err)
	}
	err = json.Unmarshal(data, &cfg)
	return cfg, err
}""",
    ],
}

# Choices for the local names of the blocks.
LOCAL_NAMES = {
    "item": ["row", "record", "entry", "element", "obj"],
    "out": ["result", "collected", "found", "output", "acc"],
    "tally": ["counts", "totals", "tally", "histogram", "freq"],
    "key": ["key", "name", "label", "k", "ident"],
    "val": ["value", "val", "v", "amount", "usage"],
    "src": ["path", "source", "filename", "location", "csv_path"],
    "verb": ["load", "read", "import", "collect", "parse"],
    "dir": ["/var/backups", "/srv/backups", "/data/dumps", "/mnt/archive", "/backup"],
}

# How each language writes a settings block: a comment line, then open + sep.join(lines) + close.
# Line placeholders: {NAME} upper snake case, {name} snake case, {Name} camel case,
# {value} quoted as the language wants, {raw} unquoted.
SETTINGS_SYNTAX = {
    "python": {"comment": "# %s", "open": "", "line": "{NAME} = {value}", "sep": "\n", "close": ""},
    "javascript": {
        "comment": "// %s",
        "open": "const settings = {\n",
        "line": "  {name}: {value},",
        "sep": "\n",
        "close": "\n};",
    },
    "bash": {"comment": "# %s", "open": "", "line": '{NAME}="{raw}"', "sep": "\n", "close": ""},
    "sql": {
        "comment": "-- %s",
        "open": "INSERT INTO settings (name, value) VALUES\n",
        "line": "  ('{name}', '{raw}')",
        "sep": ",\n",
        "close": ";",
    },
    "yaml": {
        "comment": "# %s",
        "open": "settings:\n",
        "line": "  {name}: {value}",
        "sep": "\n",
        "close": "",
    },
    "c": {
        "comment": "/* %s */",
        "open": "",
        "line": "#define {NAME} {value}",
        "sep": "\n",
        "close": "",
    },
    "go": {
        "comment": "// %s",
        "open": "const (\n",
        "line": "\t{Name} = {value}",
        "sep": "\n",
        "close": "\n)",
    },
}

FILE_EXTENSIONS = {
    "python": "py",
    "javascript": "js",
    "bash": "sh",
    "sql": "sql",
    "yaml": "yaml",
    "c": "c",
    "go": "go",
}

SETTINGS_COMMENTS = [
    "Settings of the %%entity%% service; ask the operators before changing them.",
    "Defaults for the %%entity%% job, overridden by the environment in production.",
    "Connection settings used by the %%entity%% importer.",
    "Local development values for the %%entity%% API.",
]

# Settings without personal data: (name, kind of value). The generator draws the values.
PLAIN_SETTINGS = [
    ("port", "port"),
    ("timeout_seconds", "small_int"),
    ("retries", "tiny_int"),
    ("batch_size", "power_of_two"),
    ("log_level", "log_level"),
    ("cache_dir", "path"),
    ("max_connections", "int"),
    ("workers", "tiny_int"),
    ("region", "region"),
    ("api_url", "url"),
    ("release", "version"),
    ("queue_name", "queue"),
]

# Settings that carry personal data in ordinary web text; in code they must stay as they are.
PII_SETTINGS = [
    ("admin_email", "email"),
    ("database_host", "ipv4"),
    ("listen_ipv6", "ipv6"),
    ("support_phone", "phone"),
]

ENTITIES = [
    "orders",
    "invoices",
    "stations",
    "readings",
    "bookings",
    "sensors",
    "tickets",
    "recipes",
    "members",
    "routes",
    "measurements",
    "articles",
    "payments",
    "devices",
    "events",
    "shipments",
    "lessons",
    "forecasts",
    "visitors",
    "parcels",
]
FIELDS = ["status", "region", "category", "owner", "channel", "source", "language", "city"]
CODE_AUTHORS = ["lena", "marco", "ines", "tobias", "sofia", "jakub", "elin", "nikos", "oriol"]
CODE_REPOS = ["ops-scripts", "data-tools", "backend", "dashboard", "infra", "etl", "site"]
