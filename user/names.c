// SPDX-License-Identifier: GPL-2.0
/* records.h's names by value (names.h). */
#include "names.h"

/* one case of a name switch: every records.h X-macro entry is (constant, value, name, ...) */
#define NAME_CASE(c, v, n, ...) \
	case v: return n;

const char *tier_name(enum fst_tier t)
{
	switch (t) {
		FST_TIERS(NAME_CASE)
	}
	return "unknown";
}

const char *figure_name(enum fst_figure f)
{
	switch (f) {
		FST_FIGURES(NAME_CASE)
	}
	return "unknown";
}

const char *kind_name(unsigned kind)
{
	switch (kind) {
		FST_REQ_KINDS(NAME_CASE)
	}
	return "unknown";
}

const char *dev_level_name(unsigned level)
{
	switch (level) {
		FST_DEV_LEVELS(NAME_CASE)
	}
	return "device";
}

const char *op_name(__u32 sub)
{
	switch (sub) {
		FST_IO_OPS(NAME_CASE)
	}
	return "other";
}

const char *fs_name(unsigned fs)
{
	switch (fs) {
		FST_FILESYSTEMS(NAME_CASE)
	}
	return "unknown";
}

const char *alg_name(unsigned alg)
{
	switch (alg) {
		FST_ALGS(NAME_CASE)
	}
	return "unknown";
}

const char *work_kind_name(unsigned kind)
{
	switch (kind) {
		FST_WORK_KINDS(NAME_CASE)
	}
	return "filesystem work";
}

const char *tracer_site_name(unsigned site)
{
	switch (site) {
		FST_TRACER_SITES(NAME_CASE)
	}
	return "unknown";
}

/* FST_PARTS entries are (constant, value, field, group, colour, meaning): the name is the field's */
#define PART_CASE(c, v, field, ...) \
	case v: return #field;
const char *part_field_name(unsigned part)
{
	switch (part) {
		FST_PARTS(PART_CASE)
	}
	return "unknown";
}
