import Foundation
import SignetCore
import SignetCrypto

/// A release's rollout plan (FORMAT.md §7, "Rollouts"): signed inside the target's
/// `custom.signet.rollout`, so the targets threshold covers it and no mirror can speed up, slow
/// down or skip it.
///
/// The fleet is cut into 10,000 buckets. A device's bucket for a release is
/// ``bucket(deviceID:name:sequence:)``: a hash of its device id, the package name and the
/// sequence, so each release reorders the fleet. A step opens buckets `0..<buckets` once
/// `after` seconds have passed since `start`; a device installs once its bucket is open.
/// A paused plan stops widening at the moment it was paused; a halted release is offered to no
/// device that does not already hold it.
///
/// A plan whose start was not given (`repo add --rollout`, `repo rollout --plan` without a
/// start, `--resume`) counts from when devices can see it, not from when it was staged: it
/// carries ``stagedAt``, and its clock stands still from then until the snapshot first names the
/// targets version carrying it (``resolved(publishedAt:)``; FORMAT.md §7, "Rollouts"). Key holders may take hours
/// to sign; the first devices still see the plan's first step.
public struct TUFRollout: Sendable, Equatable {
    /// All the buckets there are: a step of `buckets` 10,000 is the whole fleet.
    public static let bucketCount = 10_000

    public struct Step: Sendable, Equatable {
        /// Seconds after the plan's start.
        public let after: Int64
        /// Buckets open from then on (0...10,000; 100 is 1%).
        public let buckets: Int
    }

    public enum State: String, Sendable {
        case active, paused, halted
    }

    public let start: Timestamp
    public let steps: [Step]
    public let state: State
    /// When the plan was paused (set while `state` is paused).
    public let pausedAt: Timestamp?
    /// When the plan was staged, for a plan that counts from its publication: its clock stands
    /// still from then until the targets version carrying it is published (nil: it counts from
    /// ``start`` as signed).
    public let stagedAt: Timestamp?

    /// The named plans `repo add --rollout NAME` takes: `default` ramps over six days.
    public static let namedPlans: [String: String] = [
        "default": "1%@0h,5%@24h,15%@48h,40%@72h,60%@96h,90%@120h,100%@144h",
        "now": "100%@0h"
    ]

    init(start: Timestamp, steps: [Step], state: State = .active, pausedAt: Timestamp? = nil, stagedAt: Timestamp? = nil) {
        self.start = start
        self.steps = steps
        self.state = state
        self.pausedAt = pausedAt
        self.stagedAt = state == .active ? stagedAt : nil
    }

    /// The same plan counting from its publication: staged at `now`, its clock standing still
    /// until devices can see it.
    public func countingFromPublication(stagedAt now: Timestamp) -> TUFRollout {
        TUFRollout(start: start, steps: steps, state: state, pausedAt: pausedAt, stagedAt: now)
    }

    /// The plan as devices count it once the targets version carrying it was published at
    /// `publishedAt` (the time the snapshot states; nil where it states none): a plan with
    /// ``stagedAt`` has its start moved on by the time from staging to publication (never
    /// back), and no longer carries it. A plan without one is unchanged.
    ///
    /// The snapshot role (an online key) states the time; it can only hold a plan back (as it
    /// can hold back the whole targets version), never make it open sooner than it would have
    /// from its staging: the shift is at least 0.
    public func resolved(publishedAt: Timestamp?) -> TUFRollout {
        guard let stagedAt else { return self }
        var shift: Int64 = 0
        if let publishedAt {
            let (held, overflow) = publishedAt.secondsSinceEpoch.subtractingReportingOverflow(stagedAt.secondsSinceEpoch)
            shift = overflow ? 0 : max(0, held)
        }
        let (moved, overflow) = start.secondsSinceEpoch.addingReportingOverflow(shift)
        return TUFRollout(start: overflow ? start : Timestamp(secondsSinceEpoch: moved), steps: steps, state: state, pausedAt: pausedAt)
    }

    /// A plan from its text: a named plan (`default`, `now`) or steps `PERCENT%@OFFSET` joined
    /// by commas, e.g. `1%@0h,10%@24h,50%@72h,100%@144h`: percentages of at most two decimals
    /// (0.01% is one bucket), rising; offsets `90s`, `30m`, `12h` or `7d` (at most 366 days),
    /// rising, the first one any. Throws `.usage` naming what is wrong.
    public init(plan text: String, start: Timestamp) throws {
        let plan = Self.namedPlans[text] ?? text
        let usage =
            "a rollout plan is steps PERCENT%@OFFSET joined by commas (1%@0h,10%@24h,100%@72h) or a named plan (\(Self.namedPlans.keys.sorted().joined(separator: ", ")))"
        var steps: [Step] = []
        for part in plan.split(separator: ",", omittingEmptySubsequences: false) {
            let pieces = part.trimmingCharacters(in: .whitespaces).split(separator: "@", omittingEmptySubsequences: false)
            guard pieces.count == 2, pieces[0].hasSuffix("%"), let buckets = Self.buckets(percent: pieces[0].dropLast()),
                let after = Self.seconds(pieces[1])
            else {
                throw SignetError(.usage, "'\(part)' is not a step: \(Self.stepRule(pieces))\(usage)")
            }
            guard buckets > 0 else { throw SignetError(.usage, "'\(part)': a step opens more than 0% of the fleet") }
            if let last = steps.last {
                guard after > last.after else { throw SignetError(.usage, "'\(part)': each step comes later than the one before it (\(usage))") }
                guard buckets > last.buckets else {
                    throw SignetError(.usage, "'\(part)': each step opens more of the fleet than the one before it (\(usage))")
                }
            }
            steps.append(Step(after: after, buckets: buckets))
        }
        guard !steps.isEmpty, steps.count <= 64 else { throw SignetError(.usage, "\(usage); at most 64 steps") }
        self.init(start: start, steps: steps)
    }

    /// Which rule a step that does not parse breaks, said first (`150%`, three decimals, more
    /// than 366 days), or nothing when it is not a step's shape at all.
    private static func stepRule(_ pieces: [Substring]) -> String {
        guard pieces.count == 2, pieces[0].hasSuffix("%") else { return "" }
        let percent = pieces[0].dropLast()
        if let dot = percent.firstIndex(of: "."), percent[percent.index(after: dot)...].count > 2 {
            return "a share has at most two decimals (0.01% is one bucket of 10,000); "
        }
        if let value = Double(percent), value > 100 { return "a share is at most 100%; " }
        if let unit = pieces[1].last, "smhd".contains(unit), let value = Int64(pieces[1].dropLast()), value >= 0, seconds(pieces[1]) == nil {
            return "an offset is at most 366 days (\(value)\(unit) is more); "
        }
        if pieces[1].last.map({ !"smhd".contains($0) }) == true { return "an offset ends in s, m, h or d (90s, 30m, 12h, 7d); " }
        return ""
    }

    /// `12.5` as buckets (1,250); nil unless 0 to 100 with at most two decimals.
    private static func buckets(percent text: Substring) -> Int? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...2).contains(parts.count), let whole = Int(parts[0]), parts[0].allSatisfy(\.isASCII), parts[0].allSatisfy(\.isNumber) else { return nil }
        var fraction = 0
        if parts.count == 2 {
            guard (1...2).contains(parts[1].count), parts[1].allSatisfy({ $0.isASCII && $0.isNumber }), let value = Int(parts[1]) else { return nil }
            fraction = parts[1].count == 1 ? value * 10 : value
        }
        guard whole <= 100 else { return nil }
        let buckets = whole * 100 + fraction
        return buckets <= bucketCount ? buckets : nil
    }

    /// `0h`, `90s`, `30m`, `12h`, `7d` in seconds, at most 366 days.
    private static func seconds(_ text: Substring) -> Int64? {
        guard let unit = text.last, text.dropLast().allSatisfy({ $0.isASCII && $0.isNumber }), let value = Int64(text.dropLast()) else { return nil }
        let scale: Int64
        switch unit {
        case "s": scale = 1
        case "m": scale = 60
        case "h": scale = 3_600
        case "d": scale = 86_400
        default: return nil
        }
        let (seconds, overflow) = value.multipliedReportingOverflow(by: scale)
        return !overflow && seconds <= 366 * 86_400 ? seconds : nil
    }

    /// The plan as `repo add` takes it (`1%@0h,10%@24h`).
    public var planText: String {
        steps.map { step in
            let percent = Self.percent(step.buckets).dropLast()
            let after =
                step.after % 86_400 == 0 && step.after > 0
                ? "\(step.after / 86_400)d"
                : step.after % 3_600 == 0
                    ? "\(step.after / 3_600)h"
                    : step.after % 60 == 0 ? "\(step.after / 60)m" : "\(step.after)s"
            return "\(percent)%@\(after)"
        }.joined(separator: ",")
    }

    /// Buckets as a share: 1,000 is `10%`, 1,250 `12.5%`, 5 `0.05%`.
    public static func percent(_ buckets: Int) -> String {
        let whole = "\(buckets / 100)"
        var fraction = String(format: "%02d", buckets % 100)
        while fraction.hasSuffix("0") { fraction.removeLast() }
        return whole + (fraction.isEmpty ? "" : "." + fraction) + "%"
    }

    /// The plan for a person: `1%@0h,10%@24h from 2026-12-01T00:00:00Z, active` (or `paused
    /// at TIME`, `halted`).
    public static func describe(_ plan: TUFRollout) -> String {
        let state = plan.state == .paused ? "paused at \(plan.pausedAt?.rfc3339 ?? "?")" : plan.state.rawValue
        guard plan.stagedAt == nil else { return "\(plan.planText) from its publication, \(state)" }
        return "\(plan.planText) from \(plan.start.rfc3339), \(state)"
    }

    /// The buckets open at `now`: those of the last step reached, counting a paused plan's
    /// time only up to its pause (0 before the start, and for a halted release).
    public func openBuckets(at now: Timestamp) -> Int {
        guard state != .halted else { return 0 }
        let until = state == .paused ? min(now, pausedAt ?? now) : now
        let (elapsed, overflow) = until.secondsSinceEpoch.subtractingReportingOverflow(start.secondsSinceEpoch)
        guard !overflow, elapsed >= 0 else { return 0 }
        return steps.last(where: { $0.after <= elapsed })?.buckets ?? 0
    }

    /// When `bucket` opens: nil when it is open already (by `now`), when the plan never opens
    /// it, or while the plan is paused or halted.
    public func opens(_ bucket: Int, at now: Timestamp) -> Timestamp? {
        guard state == .active, bucket >= openBuckets(at: now), let step = steps.first(where: { $0.buckets > bucket }) else { return nil }
        let (seconds, overflow) = start.secondsSinceEpoch.addingReportingOverflow(step.after)
        return overflow ? nil : Timestamp(secondsSinceEpoch: seconds)
    }

    /// A device's bucket for a release: the first 8 bytes of SHA-256(device id, 0x00, package
    /// name, 0x00, the sequence in decimal), big-endian, modulo 10,000.
    public static func bucket(deviceID: [UInt8], name: String, sequence: UInt64) -> Int {
        let input = deviceID + [0] + Array(name.utf8) + [0] + Array(String(sequence).utf8)
        // SHA-256 through OpenSSL cannot fail for bytes in memory; a failure would be a broken
        // library, and bucket 9,999 (the last to open) is the safe answer to it.
        guard let digest = try? Digest.compute(input, algorithm: .sha256) else { return bucketCount - 1 }
        let value = digest.bytes.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        return Int(value % UInt64(bucketCount))
    }

    /// Where a rollout stands at a time, for the publisher (`repo status`).
    public struct Progress: Sendable, Equatable {
        public enum State: String, Sendable {
            /// Widening as the plan says.
            case active
            /// Stopped widening; the share open at the pause stays open.
            case paused
            /// Offered to no device that lacks it.
            case halted
            /// Every bucket open: the whole fleet.
            case complete
        }
        public let state: State
        /// The buckets open now (100 per percent).
        public let openBuckets: Int
        /// The next step: the buckets it opens and when (nil: none comes without a change —
        /// complete, paused, halted, or the plan never reaches 100%).
        public let nextBuckets: Int?
        public let nextAt: Timestamp?
    }

    /// Where the plan stands at `now`.
    public func progress(at now: Timestamp) -> Progress {
        let open = openBuckets(at: now)
        switch state {
        case .halted: return Progress(state: .halted, openBuckets: 0, nextBuckets: nil, nextAt: nil)
        case .paused: return Progress(state: .paused, openBuckets: open, nextBuckets: nil, nextAt: nil)
        case .active:
            if open >= Self.bucketCount { return Progress(state: .complete, openBuckets: open, nextBuckets: nil, nextAt: nil) }
            let next = steps.first { $0.buckets > open }
            let at = next.flatMap { step -> Timestamp? in
                let (seconds, overflow) = start.secondsSinceEpoch.addingReportingOverflow(step.after)
                return overflow ? nil : Timestamp(secondsSinceEpoch: seconds)
            }
            return Progress(state: .active, openBuckets: open, nextBuckets: at == nil ? nil : next?.buckets, nextAt: at)
        }
    }

    /// The same plan paused at `now` (the share open when the pause is staged stays open; a
    /// plan still counting from its publication is paused before it opened anything).
    public func paused(at now: Timestamp) -> TUFRollout {
        let plan = resolved(publishedAt: now)
        return TUFRollout(start: plan.start, steps: steps, state: .paused, pausedAt: now)
    }

    /// The same plan resumed, staged at `now`: its start moves on by the time it was paused up
    /// to its publication (``stagedAt``: the pause lasts until devices see the resume), so it
    /// goes on from where it stopped.
    public func resumed(at now: Timestamp) -> TUFRollout {
        guard state == .paused, let pausedAt else { return TUFRollout(start: start, steps: steps) }
        let (held, overflow) = now.secondsSinceEpoch.subtractingReportingOverflow(pausedAt.secondsSinceEpoch)
        let shift = overflow ? 0 : max(0, held)
        return TUFRollout(start: Timestamp(secondsSinceEpoch: start.secondsSinceEpoch &+ shift), steps: steps, stagedAt: now)
    }

    /// The same release halted: offered to no device that does not hold it.
    public var halted: TUFRollout { TUFRollout(start: resolved(publishedAt: nil).start, steps: steps, state: .halted, pausedAt: nil) }

    // MARK: JSON (custom.signet.rollout)

    /// `{"start": TIME, "steps": [{"after": SECONDS, "buckets": N}, …], "state": "active" |
    /// "paused" | "halted", "paused_at": TIME, "staged_at": TIME}` (paused_at only while paused;
    /// staged_at only on an active plan that counts from its publication). Nil for anything
    /// else: a device refuses a release whose plan it cannot read rather than guess one.
    init?(json: TUFJSON) {
        guard let members = json.objectMembers, Set(members.map(\.0)).isSubset(of: ["start", "steps", "state", "paused_at", "staged_at"]),
            let startText = json["start"]?.stringValue, let start = Timestamp(rfc3339: startText),
            let stateText = json["state"]?.stringValue, let state = State(rawValue: stateText),
            let items = json["steps"]?.arrayItems, (1...64).contains(items.count)
        else { return nil }
        var steps: [Step] = []
        for item in items {
            guard let members = item.objectMembers, Set(members.map(\.0)) == ["after", "buckets"],
                case .number(let afterText)? = item["after"], let after = Int64(afterText), (0...(366 * 86_400)).contains(after),
                case .number(let bucketsText)? = item["buckets"], let buckets = Int(bucketsText), (1...Self.bucketCount).contains(buckets)
            else { return nil }
            if let last = steps.last, after <= last.after || buckets <= last.buckets { return nil }
            steps.append(Step(after: after, buckets: buckets))
        }
        var pausedAt: Timestamp? = nil
        if state == .paused {
            guard let text = json["paused_at"]?.stringValue, let at = Timestamp(rfc3339: text) else { return nil }
            pausedAt = at
        } else if json["paused_at"] != nil {
            return nil
        }
        var stagedAt: Timestamp? = nil
        if let value = json["staged_at"] {
            guard state == .active, let text = value.stringValue, let at = Timestamp(rfc3339: text) else { return nil }
            stagedAt = at
        }
        self.init(start: start, steps: steps, state: state, pausedAt: pausedAt, stagedAt: stagedAt)
    }

    var json: TUFJSON {
        var members: [(String, TUFJSON)] = [
            ("start", .string(start.rfc3339)),
            ("steps", .array(steps.map { .object([("after", .number(String($0.after))), ("buckets", .number(String($0.buckets)))]) })),
            ("state", .string(state.rawValue))
        ]
        if let pausedAt { members.append(("paused_at", .string(pausedAt.rfc3339))) }
        if let stagedAt { members.append(("staged_at", .string(stagedAt.rfc3339))) }
        return .object(members)
    }
}
