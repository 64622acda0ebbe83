import SignetCore

/// Which logs a device accepts and which witnesses must have cosigned their checkpoints
/// (c2sp.org/tlog-policy): `log VKEY [URL]`, `witness NAME VKEY [URL]`, `group NAME K|all|any
/// MEMBER…`, and exactly one `quorum NAME|none`. A checkpoint holds when one of the logs signed
/// it and the quorum of witnesses cosigned it, each witness counted once.
public struct TransparencyPolicy: Sendable, Equatable {
    /// A log: its key (the name is the log's origin) and where its tiles are, if said.
    public struct Log: Sendable, Equatable {
        public let key: NoteVerifierKey
        public let url: String?
    }

    /// A witness: its name in the policy, its cosigner key, its submission prefix if said.
    public struct Witness: Sendable, Equatable {
        public let name: String
        public let key: NoteVerifierKey
        public let url: String?
    }

    /// The quorum's rule: nothing, a witness (an index into `witnesses`), or k of members.
    indirect enum Rule: Sendable, Equatable {
        case none
        case witness(Int)
        case group(Int, [Rule])

        func holds(_ cosigned: Set<Int>) -> Bool {
            switch self {
            case .none: return true
            case .witness(let index): return cosigned.contains(index)
            case .group(let k, let members): return members.filter { $0.holds(cosigned) }.count >= k
            }
        }

        /// The fewest cosigners that can satisfy the rule.
        var fewest: Int {
            switch self {
            case .none: return 0
            case .witness: return 1
            case .group(let k, let members): return members.map(\.fewest).sorted().prefix(k).reduce(0, +)
            }
        }
    }

    public let logs: [Log]
    public let witnesses: [Witness]
    let quorum: Rule
    /// The policy as written.
    public let text: String

    /// Most logs, witnesses and groups a policy may name (the spec asks for at least 32).
    public static let largestCount = 64

    /// Reads a policy file's text. Refuses what the specification refuses: an unknown keyword,
    /// a name used before it is defined or defined twice, a member listed twice, a duplicated
    /// key, k outside 1…n, no quorum or two, a control character other than tab and newline;
    /// and a log key that is not a plain Ed25519 note key or a witness key not a cosigner's.
    public init(text: String) throws {
        func refuse(_ line: Int, _ why: String) -> SignetError {
            SignetError(.malformedInput, "not a transparency policy: line \(line): \(why) (c2sp.org/tlog-policy)")
        }
        guard !text.unicodeScalars.contains(where: { ($0.value < 0x20 && $0 != "\n" && $0 != "\t") || $0.value == 0x7f }) else {
            throw SignetError(.malformedInput, "not a transparency policy: a control character (c2sp.org/tlog-policy)")
        }
        var logs: [Log] = []
        var witnesses: [Witness] = []
        var names: [String: Rule] = [:]
        var quorum: Rule? = nil
        var groups = 0
        // Each name is a member of one group at most: a witness counts toward the quorum one way.
        var members = Set<String>()
        for (number, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = number + 1
            let fields = raw.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
            guard let keyword = fields.first, !keyword.hasPrefix("#") else { continue }
            switch keyword {
            case "log":
                guard fields.count == 2 || fields.count == 3 else { throw refuse(line, "a log line is `log VKEY [URL]`") }
                let key = try NoteVerifierKey(fields[1])
                guard key.type == .ed25519 else { throw refuse(line, "a log's key is a plain Ed25519 note key (type 0x01)") }
                guard !logs.contains(where: { $0.key.publicKey == key.publicKey }) else { throw refuse(line, "the log key is listed twice") }
                logs.append(Log(key: key, url: fields.count == 3 ? fields[2] : nil))
            case "witness":
                guard fields.count == 3 || fields.count == 4 else { throw refuse(line, "a witness line is `witness NAME VKEY [URL]`") }
                guard names[fields[1]] == nil, fields[1] != "none" else { throw refuse(line, "the name '\(fields[1])' is defined twice") }
                let key = try NoteVerifierKey(fields[2])
                guard key.type == .cosignatureV1 else { throw refuse(line, "a witness's key is a cosigner key (type 0x04, c2sp.org/tlog-cosignature)") }
                guard !witnesses.contains(where: { $0.key.publicKey == key.publicKey }) else { throw refuse(line, "the witness key is listed twice") }
                names[fields[1]] = .witness(witnesses.count)
                witnesses.append(Witness(name: fields[1], key: key, url: fields.count == 4 ? fields[3] : nil))
            case "group":
                guard fields.count >= 4 else { throw refuse(line, "a group line is `group NAME K|all|any MEMBER…`") }
                guard names[fields[1]] == nil, fields[1] != "none" else { throw refuse(line, "the name '\(fields[1])' is defined twice") }
                let memberNames = Array(fields[3...])
                guard Set(memberNames).count == memberNames.count, members.isDisjoint(with: memberNames) else {
                    throw refuse(line, "a name is a member twice (each counts toward the quorum one way only)")
                }
                members.formUnion(memberNames)
                let rules = try memberNames.map { name -> Rule in
                    guard let rule = names[name] else { throw refuse(line, "'\(name)' is not defined on an earlier line") }
                    return rule
                }
                let k: Int
                switch fields[2] {
                case "all": k = rules.count
                case "any": k = 1
                default:
                    guard fields[2].utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), !fields[2].hasPrefix("0"), let value = Int(fields[2]),
                        value >= 1, value <= rules.count
                    else { throw refuse(line, "the threshold '\(fields[2])' is not all, any or 1 to \(rules.count)") }
                    k = value
                }
                groups += 1
                names[fields[1]] = .group(k, rules)
            case "quorum":
                guard fields.count == 2 else { throw refuse(line, "a quorum line is `quorum NAME`") }
                guard quorum == nil else { throw refuse(line, "a second quorum line") }
                if fields[1] == "none" {
                    quorum = Rule.none
                } else {
                    guard let rule = names[fields[1]] else { throw refuse(line, "'\(fields[1])' is not defined on an earlier line") }
                    quorum = rule
                }
            default:
                throw refuse(line, "unknown keyword '\(keyword.prefix(40))'")
            }
            guard logs.count <= Self.largestCount, witnesses.count <= Self.largestCount, groups <= Self.largestCount else {
                throw refuse(line, "more than \(Self.largestCount) logs, witnesses or groups")
            }
        }
        guard let quorum else { throw SignetError(.malformedInput, "not a transparency policy: it has no quorum line (c2sp.org/tlog-policy)") }
        guard !logs.isEmpty else { throw SignetError(.malformedInput, "the transparency policy names no log (a `log VKEY` line)") }
        (self.logs, self.witnesses, self.quorum, self.text) = (logs, witnesses, quorum, text)
    }

    /// Whether the witnesses that cosigned (their keys) meet the quorum.
    public func isMet(by cosigners: [NoteVerifierKey]) -> Bool {
        quorum.holds(Set(witnesses.indices.filter { cosigners.contains(witnesses[$0].key) }))
    }

    /// The fewest cosignatures that can meet the quorum (for messages).
    public var fewestCosigners: Int { quorum.fewest }
}
