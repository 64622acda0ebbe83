import Foundation
@testable import Signet
import SignetTestSupport

/// The committed key fixtures (made by scripts/make-fixtures.sh with the openssl CLI).
enum Fixtures {
    static let root = Bundle.module.url(forResource: "Fixtures", withExtension: nil)!.path
    static let vectors = Bundle.module.url(forResource: "Vectors", withExtension: nil)!.path + "/wycheproof"

    static func key(_ name: String) -> String { root + "/keys/" + name }

    /// The key id of the rsa2048 fixture as openssl computed it.
    static var rsa2048KeyID: String {
        String(decoding: try! contents(key("rsa2048.keyid")), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static var passphrase: PassphraseSource { .file(key("passphrase.txt")) }

    static func signingKey() throws -> PrivateKey {
        try PrivateKey(contentsOf: key("rsa2048-pkcs8.pem"))
    }

    static func trust(_ names: String...) throws -> TrustPolicy {
        try TrustPolicy(publicKeyFiles: names.map(key))
    }
}

/// Runs `body` and returns the SignetError it threw, or nil if it did not throw one.
func signetError(_ body: () throws -> Void) -> SignetError? {
    do {
        try body()
        return nil
    } catch let error as SignetError {
        return error
    } catch {
        return nil
    }
}
