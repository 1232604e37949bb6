// SPDX-License-Identifier: GPL-2.0
/* The OpenMetrics 1.0 text of a Prometheus text exposition (openmetrics.h). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "openmetrics.h"

/*
 * A number as OpenMetrics wants it in an le label (its "canonical numbers", what Go's client and Python's
 * prometheus_client print): the shortest digits that read back as v, an exponent below 1e-4 and from 1e6 on,
 * and ".0" on an integer.
 */
static void om_number(char *out, size_t size, double v)
{
	char e[40];
	int prec = 1;
	for (; prec < 17; prec++) {
		snprintf(e, sizeof(e), "%.*e", prec - 1, v);
		if (strtod(e, NULL) == v)
			break;
	}
	snprintf(e, sizeof(e), "%.*e", prec - 1, v);
	int exp = atoi(strchr(e, 'e') + 1);
	if (exp < -4 || exp >= 6) {
		snprintf(out, size, "%s", e);
		return;
	}
	int decimals = prec - 1 - exp > 0 ? prec - 1 - exp : 0;
	snprintf(out, size, decimals ? "%.*f" : "%.*f.0", decimals, v);
}

/*
 * om_number of an le label's classic text (up to its closing quote), remembered: a histogram's buckets share a few
 * dozen bounds, and finding the shortest digits takes up to 17 conversions each, for every bucket of every
 * exposition (a second apart under serve)
 */
static const char *om_le(const char *text)
{
	static struct {
		char in[32], out[40];
	} seen[128];
	static int nr_seen;
	size_t len = strcspn(text, "\"");
	for (int i = 0; i < nr_seen; i++)
		if (strlen(seen[i].in) == len && !memcmp(seen[i].in, text, len))
			return seen[i].out;
	static char one[40];
	char *out = one;
	if (len < sizeof(seen[0].in) && nr_seen < (int)(sizeof(seen) / sizeof(seen[0]))) {
		memcpy(seen[nr_seen].in, text, len);
		seen[nr_seen].in[len] = 0;
		out = seen[nr_seen++].out;
	}
	om_number(out, sizeof(one), strtod(text, NULL));
	return out;
}

/*
 * The OpenMetrics 1.0 text of a classic exposition (expose.c's, so both say the same numbers): a family is
 * named without its counter's _total or its info's _info, with # UNIT when its name ends in a base unit,
 * every counter and histogram series has a _created sample (the collector's start: counters start at 0
 * then), le labels are canonical numbers, help escapes double quotes too, and # EOF ends it.
 */
void openmetrics_of(struct jbuf *om, const char *text, size_t len, double created)
{
	const char *end = text + len, *help = NULL;
	size_t help_len = 0;
	char fam[128] = "", type[16] = "";
	om->len = 0;
	for (const char *line = text, *nl; line < end; line = nl + 1) {
		nl = memchr(line, '\n', end - line);
		if (!nl)
			nl = end;
		int n = (int)(nl - line);
		char name[128];
		if (n > 7 && !strncmp(line, "# HELP ", 7)) {
			help = line;
			help_len = n;
			continue;
		}
		if (n > 7 && !strncmp(line, "# TYPE ", 7)) {
			if (sscanf(line + 7, "%127s %15s", name, type) != 2)
				abort(); /* family() wrote it */
			size_t nlen = strlen(name);
			const char *omtype = type;
			if (!strcmp(type, "counter") && nlen > 6 && !strcmp(name + nlen - 6, "_total"))
				name[nlen - 6] = 0;
			else if (!strcmp(type, "gauge") && nlen > 5 && !strcmp(name + nlen - 5, "_info"))
				name[nlen - 5] = 0, omtype = "info";
			snprintf(fam, sizeof(fam), "%s", name);
			nlen = strlen(fam);
			jb_add(om, "# TYPE %s %s\n", fam, omtype);
			if (nlen > 8 && !strcmp(fam + nlen - 8, "_seconds"))
				jb_add(om, "# UNIT %s seconds\n", fam);
			else if (nlen > 6 && !strcmp(fam + nlen - 6, "_bytes"))
				jb_add(om, "# UNIT %s bytes\n", fam);
			if (help) { /* "# HELP <classic name> <text>" */
				const char *t = memchr(help + 7, ' ', help_len - 7);
				jb_add(om, "# HELP %s ", fam);
				/* the text between double quotes as it is, each quote escaped */
				for (t = t ? t + 1 : help + help_len; t < help + help_len;) {
					size_t run = strcspn(t, "\"\n");
					if (run > (size_t)(help + help_len - t))
						run = help + help_len - t;
					jb_add(om, "%.*s%s", (int)run, t, t + run < help + help_len ? "\\\"" : "");
					t += run + 1;
				}
				jb_add(om, "\n");
			}
			help = NULL;
			continue;
		}
		/* a sample: name[{labels}] value -- the value after the last space (a label value may hold spaces) */
		const char *sp = line + n;
		while (sp > line && sp[-1] != ' ')
			sp--;
		size_t name_len = strcspn(line, "{ ");
		const char *labels_end = sp - 1; /* the space before the value */
		bool counter = !strcmp(type, "counter"), histogram = !strcmp(type, "histogram");
		size_t flen = strlen(fam);
		const char *suffix = line + (name_len >= flen ? flen : name_len);
		const char *le = NULL;
		if (histogram && !strncmp(suffix, "_bucket{", 8)) {
			for (const char *p = labels_end - 2; p > line + name_len; p--) /* le is the last label */
				if (!strncmp(p, "le=\"", 4)) {
					le = p;
					break;
				}
		}
		if (le && strncmp(le + 4, "+Inf", 4)) {
			jb_add(om, "%.*s%s\"} %.*s\n", (int)(le + 4 - line), line, om_le(le + 4), (int)(line + n - sp), sp);
		} else {
			jb_add(om, "%.*s\n", n, line);
		}
		if ((counter && !strncmp(suffix, "_total", 6)) || (histogram && !strncmp(suffix, "_count", 6)))
			jb_add(om, "%s_created%.*s %.3f\n", fam, (int)(labels_end - (line + name_len)), line + name_len,
			       created);
	}
	jb_add(om, "# EOF\n");
}
