// aggregate.cpp: robust aggregation of n vectors (the rows of an n x d tensor), on any device,
// vectorized over coordinates. Each rule refuses an (n, f) outside what it tolerates.
// Non-finite inputs: sorting rules place NaN last (as the largest value); distance-based rules
// treat a row holding a NaN or an infinity as infinitely far from every other; weighted means
// (NNM, bucketing) let such a row into the outputs that weigh it only; clipping takes an
// infinite row as the limit of scaling and makes a row with a NaN all NaN.
// Ties go to the lowest row index: Krum and Multi-Krum scores, Bulyan's picks, MDA's subsets,
// NNM's neighbours and the values nearest a median (MeaMed, Bulyan).
#include "guard.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

namespace {

const double INF = std::numeric_limits<double>::infinity();

[[noreturn]] void refuse(const char *rule, const std::string &why) {
    dpy_invalid(std::string(rule) + ": " + why);
}

void need(bool ok, const char *rule, int64_t n, int f, const char *what) {
    if (!ok)
        refuse(rule, "n = " + std::to_string(n) + ", f = " + std::to_string(f) +
                         " is outside what it tolerates (" + what + ")");
}

// Option checks for callers of the C API (the Lua binding refuses the same values first).
void at_least(const char *rule, const char *key, int64_t v, int64_t lo) {
    if (v < lo)
        refuse(rule, std::string("option ") + key + " must be an integer >= " + std::to_string(lo) +
                         ", got " + std::to_string(v));
}

void positive(const char *rule, const char *key, double v) {
    if (v == 0)
        refuse(rule, std::string("needs option ") + key + " (a finite number > 0)");
    if (!(std::isfinite(v) && v > 0)) {
        char shown[32];
        std::snprintf(shown, sizeof shown, "%.14g", v);
        refuse(rule, std::string("option ") + key + " must be a finite number > 0, got " + shown);
    }
}

// Squared distances between rows (n x n, float64 on the cpu), +inf where a row is not finite.
torch::Tensor sqdist(const torch::Tensor &x) {
    auto xd = x.to(torch::kFloat64);
    auto sq = (xd * xd).sum(1);
    auto d = (sq.unsqueeze(1) + sq.unsqueeze(0) - 2 * xd.mm(xd.t())).clamp_min(0);
    auto finite = torch::isfinite(xd).all(1);
    auto bad = finite.logical_not();
    d.masked_fill_(bad.unsqueeze(1) | bad.unsqueeze(0), INF);
    d.fill_diagonal_(0);
    return d.cpu();
}

// {==== coordinate-wise order statistics ====}

enum class coord { median, trimmed, closest };

// NaN last, as the largest value (a strict weak order, unlike plain <).
template <class T> bool before(T a, T b) { return a < b || (b != b && a == a); }

// Per-thread buffers of the closest statistic.
template <class T> struct scratch {
    std::vector<T> rows;                       // the values in row order
    std::vector<std::pair<T, int64_t>> near;   // (distance to the median, row)
};

// The median of n values, reordering them.
template <class T> T median_in_place(T *v, int64_t n) {
    std::nth_element(v, v + n / 2, v + n, before<T>);
    return n % 2 ? v[n / 2] : (*std::max_element(v, v + n / 2, before<T>) + v[n / 2]) / 2;
}

template <class T> double sum_of(const T *v, int64_t n) {
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += v[i];
    return sum;
}

// The mean of the k of n values (row i's at v[i], reordered) nearest their median: ordered by
// distance, NaN infinitely far, ties to the lower row; summed in ascending order of value, as the
// other statistics are. Fast path: a window of the sorted values grown on the nearer side from the
// median, exact unless the values at its largest distance lie on both sides of the median (a tie
// the window cannot tell by row); then the k smallest (distance, row) pairs.
template <class T> T closest_of(T *v, int64_t n, int64_t k, scratch<T> &s) {
    s.rows.assign(v, v + n);
    std::sort(v, v + n, before<T>);
    T med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    auto dist = [med](T a) {
        T d = std::abs(a - med);
        return d == d ? d : std::numeric_limits<T>::infinity();
    };
    int64_t lo = (n - 1) / 2, hi = lo + 1;
    while (hi - lo < k) {
        bool left = lo > 0 && (hi >= n || !(dist(v[hi]) < dist(v[lo - 1])));
        left ? lo-- : hi++;
    }
    T far = std::max(dist(v[lo]), dist(v[hi - 1]));
    bool below = false, above = false;   // values at distance far: med - far, med + far (or NaN)
    for (int64_t i : {lo - 1, lo, hi - 1, hi})
        if (i >= 0 && i < n && dist(v[i]) == far)
            (v[i] < med ? below : above) = true;
    bool outside = (lo > 0 && dist(v[lo - 1]) == far) || (hi < n && dist(v[hi]) == far);
    if (!(outside && below && above))
        return (T)(sum_of(v + lo, hi - lo) / (double)k);
    s.near.resize(n);
    for (int64_t i = 0; i < n; i++)
        s.near[i] = {dist(s.rows[i]), i};
    std::nth_element(s.near.begin(), s.near.begin() + (k - 1), s.near.end());
    for (int64_t j = 0; j < k; j++)
        v[j] = s.rows[s.near[j].second];
    std::sort(v, v + k, before<T>);
    return (T)(sum_of(v, k) / (double)k);
}

// One coordinate's n values in v (reordered): the median, the mean of the values left after
// dropping the k smallest and k largest (trimmed), or the mean of the k values closest to the
// median (closest).
template <class T> T stat_of(T *v, int64_t n, coord kind, int64_t k, scratch<T> &s) {
    if (kind == coord::trimmed) {   // two partitions put the middle n - 2k values in place
        std::nth_element(v, v + k, v + n, before<T>);
        std::nth_element(v + k, v + n - k - 1, v + n, before<T>);
        double sum = 0;
        for (int64_t i = k; i < n - k; i++)
            sum += v[i];
        return (T)(sum / (double)(n - 2 * k));
    }
    if (kind == coord::median)
        return median_in_place(v, n);
    return closest_of(v, n, k, s);
}

// The statistic of every column of a contiguous cpu n x d matrix, a block of columns at a time
// (gathered row by row, so reads stay sequential).
template <class T> torch::Tensor columns(const torch::Tensor &x, coord kind, int64_t k) {
    int64_t n = x.size(0), d = x.size(1);
    auto out = torch::empty({d}, x.options());
    const T *src = x.data_ptr<T>();
    T *dst = out.data_ptr<T>();
    const int64_t B = 256;
    at::parallel_for(0, (d + B - 1) / B, 1, [&](int64_t b0, int64_t b1) {
        std::vector<T> block(n * B), v(n);
        scratch<T> s;
        for (int64_t b = b0; b < b1; b++) {
            int64_t j0 = b * B, w = std::min(B, d - j0);
            for (int64_t i = 0; i < n; i++)
                std::copy(src + i * d + j0, src + i * d + j0 + w, block.begin() + i * B);
            for (int64_t c = 0; c < w; c++) {
                for (int64_t i = 0; i < n; i++)
                    v[i] = block[i * B + c];
                dst[j0 + c] = stat_of(v.data(), n, kind, k, s);
            }
        }
    });
    return out;
}

// Per coordinate, on any device: a cpu kernel for float and double, sorting otherwise.
torch::Tensor coordinate_stat(const torch::Tensor &x0, coord kind, int64_t k) {
    if (x0.is_cpu() && (x0.scalar_type() == torch::kFloat || x0.scalar_type() == torch::kDouble)) {
        auto x = x0.contiguous();
        return x.scalar_type() == torch::kFloat ? columns<float>(x, kind, k)
                                                : columns<double>(x, kind, k);
    }
    int64_t n = x0.size(0);
    auto s = std::get<0>(x0.sort(0));
    auto med = n % 2 ? s[n / 2].clone() : (s[n / 2 - 1] + s[n / 2]) / 2;
    if (kind == coord::median)
        return med;
    if (kind == coord::trimmed)
        return s.narrow(0, k, n - 2 * k).mean(0);
    auto dist = (x0 - med).abs().nan_to_num(INF, INF, INF);   // NaN infinitely far
    auto closest = std::get<1>(dist.sort(true, 0, false)).narrow(0, 0, k);   // stable: ties to the lower row
    return x0.gather(0, closest).mean(0);
}

// The coordinate-wise median: the middle value, or the mean of the two middle ones.
torch::Tensor median_of(const torch::Tensor &x) { return coordinate_stat(x, coord::median, 0); }

// Krum scores of the rows listed in idx (within d): the sum of each one's k smallest squared
// distances to the others of idx.
std::vector<double> krum_scores(const torch::Tensor &d, const std::vector<int64_t> &idx, int64_t k) {
    auto acc = d.accessor<double, 2>();
    std::vector<double> scores;
    for (int64_t i : idx) {
        std::vector<double> row;
        for (int64_t j : idx)
            if (j != i)
                row.push_back(acc[i][j]);
        std::sort(row.begin(), row.end());
        double s = 0;
        for (int64_t t = 0; t < k && t < (int64_t)row.size(); t++)
            s += row[t];
        scores.push_back(s);
    }
    return scores;
}

std::vector<int64_t> iota(int64_t n) {
    std::vector<int64_t> v(n);
    for (int64_t i = 0; i < n; i++)
        v[i] = i;
    return v;
}

torch::Tensor rows(const torch::Tensor &x, const std::vector<int64_t> &idx) {
    auto t = torch::tensor(idx, torch::kLong).to(x.device());
    return x.index_select(0, t);
}

// Averages of rows by a cpu weight matrix (m x n): one matmul, n x d memory at most. A non-finite
// row enters only the averages that weigh it (in the matmul its 0 weights would make NaN of all).
torch::Tensor by_weights(const torch::Tensor &x, const torch::Tensor &w) {
    auto wx = w.to(x.options());
    auto out = wx.mm(x);
    if (torch::isfinite(out.sum()).item<bool>())   // then no non-finite row reached any average
        return out;
    auto bad = torch::isfinite(x).all(1).logical_not();
    out = wx.mm(x.masked_fill(bad.unsqueeze(1), 0));
    auto bad_rows = bad.cpu().nonzero().squeeze(1);
    auto touched = (w.index_select(1, bad_rows) > 0).any(1).nonzero().squeeze(1);
    for (int64_t t = 0; t < touched.size(0); t++) {   // those averages, term by term
        int64_t i = touched[t].item<int64_t>();
        auto cols = (w[i] > 0).nonzero().squeeze(1).to(x.device());
        out[i].copy_((wx[i].index_select(0, cols).unsqueeze(1) * x.index_select(0, cols)).sum(0));
    }
    return out;
}

// Each row of d clipped to norm at most r: a finite row scaled by min(1, r / its norm) (in float64
// where the norm overflows the dtype); a row with an infinity (and no NaN) as the limit of that
// scaling, +-r / sqrt(its count of infinities) at those coordinates and 0 elsewhere; a row with a
// NaN all nan_fill (NaN: it has no direction to clip along).
torch::Tensor clip_rows(const torch::Tensor &d, double r, double nan_fill) {
    auto norm = d.norm(2, {1});
    auto out = d * (r / norm).clamp_max(1).nan_to_num(1, 1, 1).unsqueeze(1);
    auto odd = torch::isfinite(norm).logical_not().nonzero().squeeze(1);   // those three kinds
    for (int64_t t = 0; t < odd.size(0); t++) {
        auto row = d[odd[t].item<int64_t>()], o = out[odd[t].item<int64_t>()];
        auto inf = torch::isinf(row);
        if (torch::isnan(row).any().item<bool>()) {
            o.fill_(nan_fill);
        } else if (inf.any().item<bool>()) {
            o.copy_(inf.to(d.scalar_type()) * row.sign() * (r / std::sqrt(inf.sum().item<double>())));
        } else {
            auto big = row.to(torch::kFloat64);
            o.copy_(big * std::min(1.0, r / big.norm().item<double>()));
        }
    }
    return out;
}

torch::Tensor krum(const torch::Tensor &x, const dpy_agg_opts &o, int64_t m) {
    int64_t n = x.size(0);
    auto d = sqdist(x);
    auto scores = krum_scores(d, iota(n), n - o.f - 2);
    std::vector<int64_t> order = iota(n);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return scores[a] < scores[b]; });
    order.resize(m);
    return rows(x, order).mean(0);
}

torch::Tensor geometric_median(const torch::Tensor &x0, const dpy_agg_opts &o) {
    auto finite = torch::isfinite(x0).all(1);
    auto x = x0.index_select(0, finite.nonzero().squeeze(1)).to(torch::kFloat64);
    if (x.size(0) == 0)
        refuse("geometric_median", "no finite input");
    auto z = x.mean(0);
    for (int it = 0; it < o.max_iter; it++) {
        auto w = 1.0 / (x - z).norm(2, {1}).clamp_min(o.eps);
        auto next = (w.unsqueeze(1) * x).sum(0) / w.sum();
        double moved = (next - z).norm().item<double>();
        z = next;
        if (moved <= o.tol * std::max(z.norm().item<double>(), o.eps))
            break;
    }
    return z.to(x0.scalar_type());
}

// A row with a NaN contributes nothing (as one equal to v would); an infinite one its clipped limit.
torch::Tensor centered_clipping(const torch::Tensor &x, const dpy_agg_opts &o) {
    auto v = o.center ? o.center->v.to(x.options()).clone() : torch::zeros({x.size(1)}, x.options());
    for (int l = 0; l < o.iterations; l++)
        v = v + clip_rows(x - v, o.radius, 0).sum(0) / x.size(0);
    return v;
}

torch::Tensor bulyan(const torch::Tensor &x, const dpy_agg_opts &o) {
    int64_t n = x.size(0), theta = n - 2 * o.f, beta = theta - 2 * o.f;
    auto d = sqdist(x);
    std::vector<int64_t> remaining = iota(n), selected;
    while ((int64_t)selected.size() < theta) {   // Krum, again and again, on what is left
        auto s = krum_scores(d, remaining, (int64_t)remaining.size() - o.f - 2);
        auto best = std::min_element(s.begin(), s.end()) - s.begin();
        selected.push_back(remaining[best]);
        remaining.erase(remaining.begin() + best);
    }
    std::sort(selected.begin(), selected.end());   // ties nearest the median: to the lower input row
    return coordinate_stat(rows(x, selected), coord::closest, beta);
}

// Minimum-diameter averaging: the n - f rows whose largest pairwise distance is smallest.
torch::Tensor mda(const torch::Tensor &x, const dpy_agg_opts &o) {
    int64_t n = x.size(0), k = n - o.f;
    double subsets = 1;
    for (int64_t i = 0; i < o.f; i++)
        subsets = subsets * (double)(n - i) / (double)(i + 1);
    if (subsets > 1e6)
        refuse("mda", "C(" + std::to_string(n) + ", " + std::to_string(o.f) + ") = " +
                          std::to_string((long long)subsets) + " subsets exceed its limit of 10^6");
    auto d = sqdist(x);
    auto acc = d.accessor<double, 2>();
    std::vector<int64_t> pick = iota(k), best;
    double best_diam = INF;
    for (;;) {
        double diam = 0;
        for (int64_t a = 0; a < k && diam < best_diam; a++)
            for (int64_t b = a + 1; b < k; b++)
                diam = std::max(diam, acc[pick[a]][pick[b]]);
        if (best.empty() || diam < best_diam)
            best_diam = diam, best = pick;
        int64_t i = k - 1;   // the next combination, in lexicographic order
        while (i >= 0 && pick[i] == n - k + i)
            i--;
        if (i < 0)
            break;
        pick[i]++;
        for (int64_t j = i + 1; j < k; j++)
            pick[j] = pick[j - 1] + 1;
    }
    return rows(x, best).mean(0);
}

// Nearest-neighbour mixing: each row becomes the mean of its n - f nearest rows: itself first,
// then by distance, ties to the lower row.
torch::Tensor nnm(const torch::Tensor &x, const dpy_agg_opts &o) {
    int64_t n = x.size(0), k = n - o.f;
    auto d = sqdist(x);
    d.fill_diagonal_(-1);
    auto nearest = std::get<1>(d.sort(true, 1, false)).narrow(1, 0, k);
    auto w = torch::zeros({n, n}, torch::kFloat64);
    w.scatter_(1, nearest, 1.0 / (double)k);
    return by_weights(x, w);
}

torch::Tensor bucketing(const torch::Tensor &x, const dpy_agg_opts &o) {
    int64_t n = x.size(0), s = o.bucket, buckets = (n + s - 1) / s;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
    auto perm = torch::randperm(n, gen, torch::kLong);
    auto w = torch::zeros({buckets, n}, torch::kFloat64);
    for (int64_t i = 0; i < n; i++) {
        int64_t b = i / s, size = std::min(s, n - b * s);
        w[b][perm[i].item<int64_t>()] = 1.0 / (double)size;
    }
    return by_weights(x, w);
}

torch::Tensor static_clipping(const torch::Tensor &x, const dpy_agg_opts &o) {
    return clip_rows(x, o.radius, std::numeric_limits<double>::quiet_NaN());
}

torch::Tensor aggregate(const std::string &rule, const torch::Tensor &x, const dpy_agg_opts &o) {
    const char *r = rule.c_str();
    int64_t n = x.size(0);
    int f = o.f;
    at_least(r, "f", f, 0);
    if (rule == "mean")
        return need(f == 0, r, n, f, "f = 0"), x.mean(0);
    if (rule == "median")
        return need(n > 2 * f, r, n, f, "n > 2f"), median_of(x);
    if (rule == "trimmed_mean") {
        need(n > 2 * f, r, n, f, "n > 2f");
        return coordinate_stat(x, coord::trimmed, f);
    }
    if (rule == "krum")
        return need(n > 2 * f + 2, r, n, f, "n > 2f + 2"), krum(x, o, 1);
    if (rule == "multi_krum") {
        need(n > 2 * f + 2, r, n, f, "n > 2f + 2");
        at_least(r, "m", o.m, 0);   // 0: n - f
        int64_t m = o.m > 0 ? o.m : n - f;
        if (m > n - f)
            refuse(r, "m = " + std::to_string(m) + " exceeds n - f = " + std::to_string(n - f));
        return krum(x, o, m);
    }
    if (rule == "geometric_median") {
        need(n > 2 * f, r, n, f, "n > 2f");
        at_least(r, "max_iter", o.max_iter, 1);
        positive(r, "tol", o.tol);
        positive(r, "eps", o.eps);
        return geometric_median(x, o);
    }
    if (rule == "centered_clipping") {
        need(n > 2 * f, r, n, f, "n > 2f");
        positive(r, "radius", o.radius);
        at_least(r, "iterations", o.iterations, 1);
        if (o.center) {
            const auto &c = o.center->v;
            if (c.dim() != 1 || c.size(0) != x.size(1))
                refuse(r, "option center must be a vector of d = " + std::to_string(x.size(1)) +
                              " values, got shape " + c10::str(c.sizes()));
            if (!torch::isfinite(c).all().item<bool>())
                refuse(r, "option center must be finite");
        }
        return centered_clipping(x, o);
    }
    if (rule == "bulyan")
        return need(n >= 4 * f + 3, r, n, f, "n >= 4f + 3"), bulyan(x, o);
    if (rule == "meamed")
        return need(n > 2 * f, r, n, f, "n > 2f"), coordinate_stat(x, coord::closest, n - f);
    if (rule == "mda")
        return need(n > 2 * f, r, n, f, "n > 2f"), mda(x, o);
    if (rule == "nnm")
        return need(n > 2 * f, r, n, f, "n > 2f"), nnm(x, o);
    if (rule == "bucketing")
        return at_least(r, "bucket", o.bucket, 1), bucketing(x, o);
    if (rule == "static_clipping")
        return positive(r, "radius", o.radius), static_clipping(x, o);
    dpy_invalid("no aggregation rule named '" + rule + "'");
}

}  // namespace

dpy_err dpy_aggregate(dpy_tensor **out, const char *rule, const dpy_tensor *x,
                      const dpy_agg_opts *o) noexcept {
    *out = nullptr;
    return dpy_guard([&] {
        if (x->v.dim() != 2 || x->v.size(0) < 1)
            dpy_invalid(std::string(rule) + ": needs n x d inputs (n >= 1), got shape " +
                        c10::str(x->v.sizes()));
        if (!x->v.is_floating_point())
            dpy_invalid(std::string(rule) + ": needs floating-point inputs");
        torch::NoGradGuard no_grad;
        *out = dpy_wrap(aggregate(rule, x->v, *o));
    });
}
