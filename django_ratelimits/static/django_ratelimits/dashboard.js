// Live refresh of the offenders table (django-ratelimits). No library, no inline script:
// polls the JSON endpoint named in #offenders-live's data-url and swaps in the parts it
// renders (data.html: element id -> HTML). Paused while the tab is hidden or the box is
// unchecked. Texts come translated in data-text-* attributes, whole sentences whose
// {time} or {error} this script fills in (a translation may put it anywhere).
(function () {
    "use strict";

    var box = document.getElementById("offenders-live");
    if (!box || !window.fetch) {
        return;
    }
    var toggle = document.getElementById("offenders-live-toggle");
    var status = document.getElementById("offenders-status");
    var errorBox = document.getElementById("offenders-error");
    var interval = (Number(box.dataset.interval) || 5) * 1000;
    var timer = null;
    var inFlight = false;

    function running() {
        return toggle.checked && !document.hidden;
    }

    // The translated sentence in data-text-<name>, its {name} placeholders filled in.
    function phrase(name, values) {
        return (box.dataset[name] || "").replace(/\{(\w+)\}/g, function (whole, key) {
            return Object.prototype.hasOwnProperty.call(values || {}, key) ? values[key] : whole;
        });
    }

    function say(text, failed) {
        status.textContent = text;
        status.classList.toggle("rl-failed", Boolean(failed));
    }

    function showError(message) {
        errorBox.textContent = message || "";
        errorBox.hidden = !message;
    }

    function schedule() {
        window.clearTimeout(timer);
        timer = running() ? window.setTimeout(refresh, interval) : null;
    }

    function apply(data) {
        Object.keys(data.html || {}).forEach(function (id) {
            var element = document.getElementById(id);
            if (element) {
                element.outerHTML = data.html[id];
            }
        });
        showError(data.error);
        if (data.error) {
            say(phrase("textFailed", {error: data.error}), true);
        } else {
            say(phrase("textUpdated", {time: new Date().toLocaleTimeString()}), false);
        }
    }

    function refresh() {
        if (inFlight || !running()) {
            schedule();
            return;
        }
        inFlight = true;
        fetch(box.dataset.url, {
            credentials: "same-origin",
            headers: {"Accept": "application/json"}
        }).then(function (response) {
            var type = response.headers.get("Content-Type") || "";
            if (type.indexOf("application/json") === -1) {
                // Sent to the login page, or refused: a reload shows why.
                throw new Error(response.redirected
                    ? phrase("textSignedOut")
                    : response.status + " " + response.statusText);
            }
            return response.json();
        }).then(apply, function (error) {
            say(phrase("textFailed", {error: error.message}), true);
        }).then(function () {
            inFlight = false;
            schedule();
        });
    }

    toggle.addEventListener("change", function () {
        if (toggle.checked) {
            refresh();
        } else {
            say(phrase("textPaused"), false);
            schedule();
        }
    });
    document.addEventListener("visibilitychange", function () {
        if (running()) {
            refresh();
        } else {
            schedule();
        }
    });
    schedule();
}());
