import Foundation

/// The committed test inputs, one copy for every test target: key fixtures (made by
/// scripts/make-fixtures.sh with the openssl CLI), the Wycheproof vectors, and the generator of
/// hostile archives.
public enum Fixtures {
    public static let root = Bundle.module.url(forResource: "Fixtures", withExtension: nil)!.path
    public static let vectors = Bundle.module.url(forResource: "Vectors", withExtension: nil)!.path + "/wycheproof"
    /// `hostile.py`'s folder: archives built byte by byte to break readers.
    public static let hostile = Bundle.module.url(forResource: "Hostile", withExtension: nil)!.path

    public static func key(_ name: String) -> String { root + "/keys/" + name }

    /// The key id of the rsa2048 fixture as openssl computed it.
    public static var rsa2048KeyID: String {
        (try? String(contentsOfFile: key("rsa2048.keyid"), encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
    }
}
