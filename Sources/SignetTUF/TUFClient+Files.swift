#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import SignetCore
import SignetCrypto

/// The client's files: a target checked against what its role states, stored metadata read
/// back, and role names and target paths as file names and URL paths.
extension TUFClient {
    /// Checks a file against a target's length and every hash it states.
    package static func check(_ path: String, _ target: TUFTarget, name: String) throws {
        let file = try InputFile.open(path, what: "target", followSymlinks: false)
        let size = try file.descriptor.status().st_size
        guard Int64(size) == target.length else {
            throw SignetError(.metadataMismatch, "\(name) is \(size) bytes; its targets role says \(target.length)", path: name)
        }
        for (algorithm, expected) in target.hashes.sorted(by: { $0.key < $1.key }) {
            guard let digestAlgorithm = tufDigestAlgorithm(algorithm) else {
                throw SignetError(
                    .metadataMismatch,
                    "\(name) is bound by a '\(algorithm)' hash, which Signet does not compute (sha256, sha384, sha512): refused rather than unchecked",
                    path: name)
            }
            // Each hash from the file's first byte (one open file per hash: its own offset).
            let digest = try Digest.compute(descriptorOf: InputFile.open(path, what: "target", followSymlinks: false), algorithm: digestAlgorithm)
            guard digest.hex == expected.lowercased() else {
                throw SignetError(
                    .metadataMismatch, "\(name) does not have the \(algorithm) hash its targets role gives: modified on the way or on the server", path: name)
            }
        }
    }

    /// A stored metadata file (not followed through a link), nil when there is none.
    static func readStored(_ name: String, in directory: String, limit: Int) throws -> [UInt8]? {
        let path = directory + "/" + name
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        return try readSmallFile(path, what: "stored metadata", limit: limit)
    }

    /// A role name or target path as one file name: every byte but `A–Z a–z 0–9 _ . - ~`
    /// percent-encoded (as python-tuf's `quote(name, "")`: `/` too, so no name leaves the folder).
    static func quoted(_ name: String) -> String {
        var out = ""
        for byte in name.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "-"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                out += "%" + String(byte >> 4, radix: 16, uppercase: true) + String(byte & 0xF, radix: 16, uppercase: true)
            }
        }
        return out
    }

    /// A target path in a URL: each `/`-separated part percent-encoded.
    static func quotedPath(_ path: String) -> String {
        path.split(separator: "/", omittingEmptySubsequences: false).map { quoted(String($0)) }.joined(separator: "/")
    }
}

extension TUFClient {
}
