#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import COpenSSL
import SignetCore

/// A passphrase for an encrypted private key. Its bytes are wiped when the last copy goes away.
public struct Passphrase: Sendable {
    final class Storage: @unchecked Sendable {
        var bytes: [UInt8]
        init(_ bytes: [UInt8]) { self.bytes = bytes }
        deinit {
            bytes.withUnsafeMutableBytes { raw in
                if let base = raw.baseAddress { OPENSSL_cleanse(base, raw.count) }
            }
        }
    }

    let storage: Storage

    /// A passphrase from raw bytes.
    public init(bytes: [UInt8]) { storage = Storage(bytes) }
    /// A passphrase from a string (its UTF-8 bytes).
    public init(_ string: String) { storage = Storage(Array(string.utf8)) }

    var bytes: [UInt8] { storage.bytes }
    /// True for the empty passphrase.
    public var isEmpty: Bool { storage.bytes.isEmpty }

    /// Calls `body` with the passphrase as a NUL-terminated C string, wiped afterwards.
    func withCString<R>(_ body: (UnsafePointer<CChar>, Int32) throws -> R) rethrows -> R {
        var copy = storage.bytes.map { CChar(bitPattern: $0) } + [0]
        defer { copy.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) } }
        return try copy.withUnsafeBufferPointer { try body($0.baseAddress!, Int32(clamping: storage.bytes.count)) }
    }
}

/// Where a passphrase comes from. It is asked for only when a key turns out to be encrypted.
///
/// Secrets never travel on the command line: use a file, an environment variable, or (in the
/// CLI) a prompt without echo.
public struct PassphraseSource: Sendable {
    /// Produces the passphrase for the key file named by the argument.
    let obtain: @Sendable (_ keyDescription: String) throws -> Passphrase
    /// Describes the source in messages ("the file 'pass.txt'").
    public let description: String

    /// A custom provider, e.g. a prompt. It receives the key's path and returns the passphrase.
    public init(description: String, _ provider: @escaping @Sendable (_ keyPath: String) throws -> Passphrase) {
        self.description = description
        self.obtain = provider
    }

    /// Obtains the passphrase now. `keyPath` names the key it is for (prompts show it).
    public func passphrase(for keyPath: String) throws -> Passphrase {
        try obtain(keyPath)
    }

    /// The first line of a file (without its line ending), as `openssl -passin file:` reads it.
    /// An empty first line is refused (`.emptyPassphrase`, exit 4): a source given explicitly
    /// but empty is a mistake (a failed `pass show`, an unset secret), and an empty passphrase
    /// would write an unprotected key. `what` names the file in messages.
    ///
    /// A file that does not exist is reported without its name: a secret given where its file's
    /// name belongs (`--passphrase-file 'correct horse'`) must not reach a log.
    public static func file(_ path: String, what: String = "passphrase file") -> PassphraseSource {
        PassphraseSource(description: "the \(what) '\(path)'") { _ in
            let bytes: [UInt8]
            do {
                bytes = try readSmallFile(path, what: what, limit: 64 * 1024, allowPipes: true)
            } catch let error as SignetError where error.code == .fileNotFound {
                throw SignetError(
                    .fileNotFound,
                    "the \(what) does not exist (its name is not repeated here, in case it is the secret itself); give the path of a file whose first line is the secret"
                )
            }
            var line = bytes.prefix { $0 != UInt8(ascii: "\n") }
            if line.last == UInt8(ascii: "\r") { line.removeLast() }
            guard !line.isEmpty else {
                throw SignetError(
                    .emptyPassphrase, "the \(what) '\(path)' is empty (its first line holds nothing); put the secret on its first line", path: path)
            }
            return Passphrase(bytes: Array(line))
        }
    }

    /// The value of an environment variable. Unset or empty is refused (exit 4); a name that
    /// cannot be a variable's (`[A-Za-z_][A-Za-z0-9_]*`) is refused (exit 2) without repeating
    /// it, since it may be the secret itself given where its variable's name belongs.
    public static func environment(_ name: String) -> PassphraseSource {
        guard isVariableName(name) else {
            return PassphraseSource(description: "an environment variable") { _ in throw invalidVariableName(option: "--passphrase-env") }
        }
        return PassphraseSource(description: "the environment variable \(name)") { _ in
            guard let value = getenv(name) else {
                throw SignetError(
                    .passphraseRequired,
                    "the environment variable \(name) named by --passphrase-env is not set; export it or use --passphrase-file")
            }
            guard value.pointee != 0 else {
                throw SignetError(
                    .emptyPassphrase, "the environment variable \(name) named by --passphrase-env is empty; set it to the passphrase, or use --passphrase-file")
            }
            return Passphrase(bytes: Array(UnsafeBufferPointer(start: value, count: strlen(value)).map { UInt8(bitPattern: $0) }))
        }
    }

    /// Whether `name` can name an environment variable: a letter or `_`, then letters, digits
    /// and `_` (at most 255 bytes).
    public static func isVariableName(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard let first = bytes.first, bytes.count <= 255 else { return false }
        func letter(_ b: UInt8) -> Bool { (b | 0x20) >= UInt8(ascii: "a") && (b | 0x20) <= UInt8(ascii: "z") || b == UInt8(ascii: "_") }
        return letter(first) && bytes.allSatisfy { letter($0) || ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9")) }
    }

    /// The refusal of a value that is not a variable name, which never repeats the value.
    static func invalidVariableName(option: String) -> SignetError {
        SignetError(
            .usage,
            "\(option) takes the NAME of an environment variable (letters, digits and _, e.g. SIGNET_PASSPHRASE); the value given is not a valid variable name, and is not repeated here in case it is the secret itself"
        )
    }

    /// A passphrase already in memory.
    public static func literal(_ passphrase: Passphrase) -> PassphraseSource {
        PassphraseSource(description: "the given passphrase") { _ in passphrase }
    }
}

/// A warning when a private key (or passphrase) file can be read by group or others.
func exposureWarning(mode: mode_t, path: String, what: String) -> String? {
    guard mode & 0o044 != 0 else { return nil }
    let octal = String(mode & 0o777, radix: 8)
    return "\(what) '\(path)' can be read by group or others (mode 0\(octal)); restrict it with: chmod 600 '\(path)'"
}

extension Passphrase {
    /// Compares two passphrases (for "repeat the passphrase" prompts).
    public func matches(_ other: Passphrase) -> Bool { bytes == other.bytes }
}
