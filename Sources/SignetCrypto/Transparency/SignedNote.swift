internal import COpenSSL
import Foundation
import SignetCore

/// A signed note (c2sp.org/signed-note): UTF-8 text ending in a newline, a blank line, and
/// signature lines `— NAME BASE64(KEYHASH || SIGNATURE)`. Ed25519 keys only: the note's
/// signature type 0x01, the key hash the first four bytes of SHA-256(NAME || "\n" || 0x01 ||
/// KEY), through OpenSSL's EVP.
public struct SignedNote: Sendable, Equatable {
    /// The signed text, its final newline included.
    public let text: String
    /// The signatures a known key made and that verified, in the note's order.
    public let verifiedBy: [NoteVerifierKey]
    /// The time each cosigner among `verifiedBy` stated (POSIX seconds).
    public let cosignedAt: [NoteVerifierKey: UInt64]
    /// Signatures by keys the caller did not name (kept, not trusted): `name` and key hash.
    public let unknown: [(name: String, keyHash: UInt32)]

    public static func == (a: SignedNote, b: SignedNote) -> Bool {
        a.text == b.text && a.verifiedBy == b.verifiedBy && a.cosignedAt == b.cosignedAt && a.unknown.map(\.name) == b.unknown.map(\.name)
            && a.unknown.map(\.keyHash) == b.unknown.map(\.keyHash)
    }

    /// Most signature lines a note may carry (as x/mod's note package).
    public static let largestSignatureCount = 100
    /// Longest note read.
    public static let largestNote = 1 << 20

    private static let separator = Array("\n\n".utf8)

    /// Opens `bytes`: the text, and which of `known` signed it. A signature by a known key that
    /// does not verify, two signatures by one key, or a note with no signature by a known key
    /// is refused; so is anything not in the signed-note form (control characters, invalid
    /// UTF-8, a missing blank line). Errors are `.malformedInput` (the form) and
    /// `.untrustedSigner` (the signatures).
    public static func open(_ bytes: [UInt8], known: [NoteVerifierKey]) throws -> SignedNote {
        guard bytes.count <= largestNote else { throw malformed("longer than \(largestNote) bytes") }
        guard let whole = String(validating: bytes, as: UTF8.self) else { throw malformed("not UTF-8") }
        guard !whole.unicodeScalars.contains(where: { $0.value < 0x20 && $0 != "\n" }) else { throw malformed("a control character") }
        guard let split = lastRange(of: separator, in: bytes) else { throw malformed("no blank line before its signatures") }
        let textBytes = Array(bytes[..<(split + 1)])
        let signatureBlock = Array(bytes[(split + 2)...])
        guard signatureBlock.last == 0x0a else { throw malformed("its signatures do not end with a newline") }
        var verified: [NoteVerifierKey] = []
        var times: [NoteVerifierKey: UInt64] = [:]
        var unknown: [(String, UInt32)] = []
        var count = 0
        for line in String(decoding: signatureBlock.dropLast(), as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false) {
            guard line.hasPrefix("— ") else { throw malformed("a signature line does not start with '— '") }
            let rest = line.dropFirst(2)
            guard let space = rest.firstIndex(of: " ") else { throw malformed("a signature line has no signature") }
            let name = String(rest[..<space])
            let encoded = String(rest[rest.index(after: space)...])
            guard NoteVerifierKey.isValidName(name), let raw = [UInt8](base64: encoded), raw.count >= 5 else {
                throw malformed("a signature line is not NAME BASE64")
            }
            count += 1
            guard count <= largestSignatureCount else { throw malformed("more than \(largestSignatureCount) signatures") }
            let hash = raw[0..<4].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            guard let key = known.first(where: { $0.name == name && $0.keyHash == hash }) else {
                unknown.append((name, hash))
                continue
            }
            guard !verified.contains(key) else {
                throw SignetError(.untrustedSigner, "the note carries two signatures by \(name)+\(key.hashText): each key counts once")
            }
            let (valid, time) = key.verifies(noteSignature: Array(raw[4...]), text: textBytes)
            guard valid else { throw SignetError(.untrustedSigner, "the signature by \(name)+\(key.hashText) does not verify over the note's text") }
            verified.append(key)
            if let time { times[key] = time }
        }
        guard !verified.isEmpty else {
            throw SignetError(
                .untrustedSigner,
                "no key this device trusts signed the note (signed by \(unknown.map { "\($0.0)+\(String(format: "%08x", $0.1))" }.joined(separator: ", ")))")
        }
        return SignedNote(text: String(decoding: textBytes, as: UTF8.self), verifiedBy: verified, cosignedAt: times, unknown: unknown)
    }

    /// `text` signed by each of `signers` (cosigners stating `time`, POSIX seconds): the
    /// note's bytes.
    public static func sign(_ text: String, by signers: [NoteSignerKey], time: UInt64 = 0) throws -> [UInt8] {
        guard text.hasSuffix("\n"), !text.unicodeScalars.contains(where: { $0.value < 0x20 && $0 != "\n" }) else {
            throw malformed("a note's text ends with a newline and has no other control character")
        }
        let body = Array(text.utf8)
        var note = body + [0x0a]
        for signer in signers {
            let signature = try signer.noteSignature(body, time: time)
            let hash = withUnsafeBytes(of: signer.verifier.keyHash.bigEndian) { Array($0) }
            note += Array("— \(signer.verifier.name) ".utf8) + Array((hash + signature).base64EncodedString().utf8) + [0x0a]
        }
        return note
    }

    /// Adds the signatures of `signers` to a signed note's bytes (a witness cosigning a
    /// checkpoint): the text is kept as it is.
    public static func cosign(_ note: [UInt8], by signers: [NoteSignerKey], time: UInt64) throws -> [UInt8] {
        guard let split = lastRange(of: separator, in: note) else { throw malformed("no blank line before its signatures") }
        let body = Array(note[..<(split + 1)])
        var out = note
        for signer in signers {
            let signature = try signer.noteSignature(body, time: time)
            let hash = withUnsafeBytes(of: signer.verifier.keyHash.bigEndian) { Array($0) }
            out += Array("— \(signer.verifier.name) ".utf8) + Array((hash + signature).base64EncodedString().utf8) + [0x0a]
        }
        return out
    }

    static func malformed(_ why: String) -> SignetError { SignetError(.malformedInput, "not a signed note: \(why) (c2sp.org/signed-note)") }

    private static func lastRange(of needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        var start = haystack.count - needle.count
        while start >= 0 {
            if haystack[start..<(start + needle.count)].elementsEqual(needle) { return start }
            start -= 1
        }
        return nil
    }
}

extension Array where Element == UInt8 {
    /// Standard base64 (with padding), nil when `text` is not that.
    init?(base64 text: String) {
        guard let data = Data(base64Encoded: text), data.base64EncodedString() == text else { return nil }
        self = Array(data)
    }

    func base64EncodedString() -> String { Data(self).base64EncodedString() }
}
