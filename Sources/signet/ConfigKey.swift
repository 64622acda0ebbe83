import ArgumentParser
import TOMLKit

/// What one key of an `update --config` file takes, as TOML types (FORMAT.md §6): a value of
/// another type is exit 2 naming the key, its line and what to write — never read as something
/// else (`version-lock = 1.10` is the float 1.1 to TOML: it is refused, "quote it").
enum ConfigKey: Equatable {
    /// `true` or `false`.
    case flag
    /// A string.
    case string
    /// A string, or a whole number (a sequence: `version-lock = 143`), never a decimal.
    case stringOrSequence
    /// A string, or a list of strings (a repeatable option).
    case strings
    /// A whole number (bytes, counts, seconds that take no fraction).
    case integer
    /// A number, whole or decimal (seconds).
    case number
    /// `"yes"`, `"no"`, `true` or `false` (keep-previous).
    case yesNo
    /// `true`, `false` or `"auto"` (verity).
    case flagOrAuto

    /// Every key `signet update --config` takes: each long option of `update` but `--config`,
    /// `--unset`, `--check`, `--json`, `--quiet` and `--ignore-rollout` (a config key would opt
    /// a device out of every rollout).
    static let update: [String: ConfigKey] = [
        "repository": .string, "tuf-metadata": .string, "channel": .string, "dest": .string, "state": .string,
        "package": .string, "targets-url": .string, "device-id-file": .string,
        "tls-ca": .strings, "tls-pin": .strings, "tls-cert": .strings, "allow-http": .flag,
        "trust-salt-file": .string, "trust-seal-key": .strings, "allow-weak-key": .flag,
        "max-download-size": .integer, "connect-timeout": .integer, "low-speed-time": .integer, "max-time": .number,
        "retries": .integer, "retry-delay": .number, "full-download": .flag, "force": .flag, "repair": .flag,
        "max-files": .integer, "max-total-size": .integer, "max-ratio": .integer, "wait": .number,
        "hold": .flag, "version-lock": .stringOrSequence,
        "ima": .string, "verity": .flagOrAuto, "keep-previous": .yesNo, "pending": .flag, "retry-bad": .flag,
        "post-install": .string, "health-check": .string, "health-timeout": .string, "pre-install": .string, "window": .strings,
        "decryption-key": .string, "decryption-passphrase-file": .string, "tlog-policy": .string
    ]

    /// Keys of other commands' trust options that `update` refuses, and why.
    static let refusedByUpdate: [String: String] = Dictionary(
        uniqueKeysWithValues: ["pubkey", "trust-dir", "ca", "pin", "revoked", "expect-subject", "allow-expired-cert", "clock-skew"].map {
            (
                $0,
                "update takes the package keys, and who may sign which package, from the repository's trusted metadata (tuf-metadata); '\($0)' belongs to unpack and verify: leave it out"
            )
        })

    /// What to write, for a message.
    var expected: String {
        switch self {
        case .flag: return "true or false"
        case .string: return "a string in quotes"
        case .stringOrSequence: return "a string in quotes (a version prefix: \"1.10\") or a whole number (a sequence: 143)"
        case .strings: return "a string in quotes or a list of them ([\"…\", \"…\"])"
        case .integer: return "a whole number"
        case .number: return "a number"
        case .yesNo: return "\"yes\", \"no\", true or false"
        case .flagOrAuto: return "true or false, or \"auto\""
        }
    }

    /// The command-line words for `value` of `key` (`--key VALUE`, repeated for a list; a flag
    /// alone, or nothing for false). `literal` is the value as the file spells it (for the
    /// "quote it" hint). Throws a `ValidationError` saying what the key takes.
    func arguments(_ key: String, _ value: TOMLValueConvertible, at place: String, literal: String?) throws -> [String] {
        let option = "--" + key
        let item = value.tomlValue
        func refuse(_ type: TOMLType, _ what: String? = nil) -> ValidationError {
            let found: String
            switch type {
            case .double: found = "a decimal number (TOML reads \(literal ?? "it") as \(item.double.map { String(describing: $0) } ?? "a float"))"
            case .int: found = "a whole number"
            case .bool: found = "true or false"
            case .string: found = "a string"
            case .array: found = "a list"
            case .table: found = "a table"
            default: found = "a date or time"
            }
            let quote =
                type == .double && (self == .string || self == .stringOrSequence || self == .strings)
                ? ": quote it, as in \(key) = \"\(literal ?? "…")\"" : ""
            return ValidationError("\(place): '\(key)' takes \(what ?? expected), not \(found)\(quote)")
        }
        if item.type == .array, let array = item.array {
            guard self == .strings else { throw refuse(.array, "one value, not a list: \(expected)") }
            return try Array(array).flatMap { element -> [String] in
                let member = element.tomlValue
                guard member.type == .string, let string = member.string else { throw refuse(member.type) }
                return [option, string]
            }
        }
        switch (self, item.type) {
        case (.flag, .bool), (.flagOrAuto, .bool):
            return item.bool == true ? [option] : []
        case (.flagOrAuto, .string) where item.string == "auto":
            return ["--verity-auto"]
        case (.yesNo, .bool):
            return [option, item.bool == true ? "yes" : "no"]
        case (.yesNo, .string), (.string, .string), (.strings, .string), (.stringOrSequence, .string):
            return [option, item.string ?? ""]
        case (.stringOrSequence, .int), (.integer, .int), (.number, .int):
            return [option, String(item.int ?? 0)]
        case (.number, .double):
            return [option, String(item.double ?? 0)]
        default:
            throw refuse(item.type)
        }
    }
}
